# modelfs_e2e_test(NAME SOURCES a_e2e_test.cc ... DEPS dep ... [LABELS e2e ...] [TIMEOUT s]
#                  [TSAN] [NEEDS_MODELFS] [NEEDS_SNAPSHOTTER]
#                  [CONTAINERD_RELEASES VERSION=GTEST_FILTER ...])
# An end-to-end test: modelfs_test (cmake/modelfs.cmake) with the label e2e unless LABELS says
# otherwise, and a timeout of 300 s unless TIMEOUT does.
#   NEEDS_MODELFS      the test runs the modelfs binary: it is built first, and the test finds it
#                      in $MODELFS_BIN.
#   NEEDS_SNAPSHOTTER  the test runs modelfs-snapshotter: it is built first when this tree
#                      builds it (the test skips, or under CI=true fails, when it is missing).
#   CONTAINERD_RELEASES  the binary runs pods on an upstream containerd release
#                      (testsupport/harness/containerd_release.h): one CTest entry per release,
#                      named NAME_VERSION, labelled containerd-VERSION, with
#                      $MODELFS_CONTAINERD_RELEASE=VERSION and the gtest filter given ("*" runs
#                      every test). docs/install.md's tested matrix is checked against these
#                      entries (install_matrix_docs_test).
# A test binary on Debian's containerd 1.6 says so with LABELS ... containerd-1.6.
function(modelfs_e2e_test name)
  cmake_parse_arguments(ARG "TSAN;NEEDS_MODELFS;NEEDS_SNAPSHOTTER" "TIMEOUT"
                        "SOURCES;DEPS;LABELS;CONTAINERD_RELEASES" ${ARGN})
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
  set(env)
  if(ARG_NEEDS_MODELFS)
    list(APPEND env "MODELFS_BIN=$<TARGET_FILE:modelfs>")
  endif()
  if(NOT ARG_CONTAINERD_RELEASES)
    modelfs_test(${name} SOURCES ${ARG_SOURCES} DEPS ${ARG_DEPS} LABELS ${ARG_LABELS}
                 TIMEOUT ${ARG_TIMEOUT} ${tsan})
    if(env)
      set_property(TEST ${name} APPEND PROPERTY ENVIRONMENT ${env})
    endif()
  else()
    modelfs_test(${name} SOURCES ${ARG_SOURCES} DEPS ${ARG_DEPS} LABELS ${ARG_LABELS}
                 TIMEOUT ${ARG_TIMEOUT} ${tsan} NO_CTEST)
    foreach(release IN LISTS ARG_CONTAINERD_RELEASES)
      string(FIND "${release}" "=" eq)
      if(eq LESS 1)
        message(FATAL_ERROR "${name}: CONTAINERD_RELEASES wants VERSION=GTEST_FILTER, got ${release}")
      endif()
      string(SUBSTRING "${release}" 0 ${eq} version)
      math(EXPR from "${eq} + 1")
      string(SUBSTRING "${release}" ${from} -1 filter)
      set(args)
      if(NOT filter STREQUAL "*")
        set(args "--gtest_filter=${filter}")
      endif()
      modelfs_add_ctest(${name}_${version} TARGET ${name} ARGS ${args}
        ENVIRONMENT "MODELFS_CONTAINERD_RELEASE=${version}" ${env}
        LABELS ${ARG_LABELS} containerd-${version} TIMEOUT ${ARG_TIMEOUT} ${tsan})
    endforeach()
  endif()
  if(ARG_NEEDS_MODELFS)
    add_dependencies(${name} modelfs)
  endif()
  if(ARG_NEEDS_SNAPSHOTTER AND TARGET modelfs-snapshotter)
    add_dependencies(${name} modelfs-snapshotter)
  endif()
endfunction()
