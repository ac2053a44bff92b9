# modelfs_e2e_test(NAME SOURCES a_e2e_test.cc ... DEPS dep ... [LABELS e2e ...] [TIMEOUT s]
#                  [TSAN] [NEEDS_MODELFS] [NEEDS_SNAPSHOTTER])
# An end-to-end test: modelfs_test (cmake/modelfs.cmake) with the label e2e unless LABELS says
# otherwise, and a timeout of 300 s unless TIMEOUT does.
#   NEEDS_MODELFS      the test runs the modelfs binary: it is built first, and the test finds it
#                      in $MODELFS_BIN.
#   NEEDS_SNAPSHOTTER  the test runs modelfs-snapshotter: it is built first when this tree
#                      builds it (the test skips, or under CI=true fails, when it is missing).
function(modelfs_e2e_test name)
  cmake_parse_arguments(ARG "TSAN;NEEDS_MODELFS;NEEDS_SNAPSHOTTER" "TIMEOUT"
                        "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT ARG_LABELS)
    set(ARG_LABELS e2e)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  set(tsan)
  if(ARG_TSAN)
    set(tsan TSAN)
  endif()
  modelfs_test(${name} SOURCES ${ARG_SOURCES} DEPS ${ARG_DEPS} LABELS ${ARG_LABELS}
               TIMEOUT ${ARG_TIMEOUT} ${tsan})
  if(ARG_NEEDS_MODELFS)
    add_dependencies(${name} modelfs)
    set_property(TEST ${name} APPEND PROPERTY ENVIRONMENT "MODELFS_BIN=$<TARGET_FILE:modelfs>")
  endif()
  if(ARG_NEEDS_SNAPSHOTTER AND TARGET modelfs-snapshotter)
    add_dependencies(${name} modelfs-snapshotter)
  endif()
endfunction()
