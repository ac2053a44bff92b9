# Small helpers so every modelfs target is declared the same way: explicit sources, our
# warning flags, and the repository root as the include root ("core/formats/gguf.h").

set(MODELFS_WARNINGS -Wall -Wextra -Wpedantic -Wno-unused-parameter -Wno-missing-field-initializers)
# Clang checks the ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED annotations on shared state
# (docs/design.md, "Locks and their order"); with MODELFS_WERROR a violation fails the build.
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  list(APPEND MODELFS_WARNINGS -Wthread-safety)
endif()
if(MODELFS_WERROR)
  list(APPEND MODELFS_WARNINGS -Werror)
endif()

# modelfs_library(NAME SOURCES a.cc ... DEPS dep ...)
function(modelfs_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
  target_compile_options(${name} PRIVATE ${MODELFS_WARNINGS})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
endfunction()

# modelfs_test(NAME SOURCES a_test.cc ... DEPS dep ... [LABELS unit|e2e ...] [TIMEOUT s] [TSAN]
#              [NO_CTEST])
# Unit tests carry the label "unit"; slow end-to-end tests carry "e2e" so
# `ctest -L unit` stays fast. A binary whose tests were all skipped (testsupport/testing/skip.h)
# prints a marker line (testsupport/testing/test_main.cc) and CTest reports it as skipped, not passed.
# In the ThreadSanitizer tree (MODELFS_TSAN, scripts/tsan.sh) every unit test, and an e2e test
# marked TSAN, also carries the label "tsan"; the other tests are neither built nor run there.
# NO_CTEST builds the binary only: the caller registers it (modelfs_add_ctest), several times
# perhaps.
function(modelfs_test name)
  cmake_parse_arguments(ARG "TSAN;NO_CTEST" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES} $<TARGET_OBJECTS:modelfs_test_main>)
  target_compile_options(${name} PRIVATE ${MODELFS_WARNINGS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} modelfs_testing GTest::gtest GTest::gmock)
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  set(tsan)
  if(ARG_TSAN)
    set(tsan TSAN)
  endif()
  if(MODELFS_TSAN)
    if(ARG_TSAN OR "unit" IN_LIST ARG_LABELS)
      add_dependencies(modelfs_tsan_tests ${name})
    else()
      # Registered (other CMake code sets its properties) but neither built nor run here.
      set_target_properties(${name} PROPERTIES EXCLUDE_FROM_ALL ON)
    endif()
  endif()
  if(NOT ARG_NO_CTEST)
    modelfs_add_ctest(${name} TARGET ${name} LABELS ${ARG_LABELS} TIMEOUT ${ARG_TIMEOUT} ${tsan})
  endif()
endfunction()

# modelfs_add_ctest(TEST_NAME TARGET binary [ARGS arg ...] [ENVIRONMENT VAR=value ...]
#                   LABELS label ... TIMEOUT s [TSAN])
# One CTest entry running a modelfs_test binary with its labels, timeout, skip marker and
# environment (under TSan: the tsan label and a longer timeout, or disabled, as modelfs_test
# says).
function(modelfs_add_ctest test_name)
  cmake_parse_arguments(ARG "TSAN" "TARGET;TIMEOUT" "ARGS;ENVIRONMENT;LABELS" ${ARGN})
  set(labels ${ARG_LABELS})
  set(timeout ${ARG_TIMEOUT})
  set(disabled OFF)
  if(MODELFS_TSAN)
    if(ARG_TSAN OR "unit" IN_LIST labels)
      list(PREPEND labels tsan)
      math(EXPR timeout "${timeout} * 4")  # TSan runs code 5-15x slower
    else()
      set(disabled ON)
    endif()
  endif()
  add_test(NAME ${test_name} COMMAND ${ARG_TARGET} ${ARG_ARGS})
  set_tests_properties(${test_name} PROPERTIES LABELS "${labels}" TIMEOUT ${timeout}
    SKIP_REGULAR_EXPRESSION "modelfs-test: every test was skipped"
    ENVIRONMENT "MODELFS_SOURCE_DIR=${PROJECT_SOURCE_DIR};MODELFS_BINARY_DIR=${PROJECT_BINARY_DIR}")
  foreach(env IN LISTS ARG_ENVIRONMENT)
    set_property(TEST ${test_name} APPEND PROPERTY ENVIRONMENT "${env}")
  endforeach()
  if(MODELFS_TSAN)
    modelfs_tsan_environment(${test_name})
    if(disabled)
      set_tests_properties(${test_name} PROPERTIES DISABLED ON)
    endif()
  endif()
endfunction()

# The suppressions of third-party noise (tests/tsan/suppressions.txt, each entry justified there)
# are appended to whatever TSAN_OPTIONS the caller set (scripts/test.sh: halt_on_error=1).
function(modelfs_tsan_environment test)
  set_property(TEST ${test} APPEND PROPERTY ENVIRONMENT_MODIFICATION
    "TSAN_OPTIONS=string_append: suppressions=${PROJECT_SOURCE_DIR}/tests/tsan/suppressions.txt")
endfunction()

# modelfs_fuzzer(NAME SOURCES fuzz.cc INSTRUMENT lib_sources... DEPS ... CORPUS dir RUNS n)
# Builds a libFuzzer target whose parser sources are compiled with coverage instrumentation,
# and a CTest that replays the checked-in corpus and then fuzzes for RUNS iterations.
function(modelfs_fuzzer name)
  cmake_parse_arguments(ARG "" "CORPUS;RUNS" "SOURCES;INSTRUMENT;DEPS" ${ARGN})
  if(NOT MODELFS_FUZZ)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES} ${ARG_INSTRUMENT})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_options(${name} PRIVATE ${MODELFS_WARNINGS} -fsanitize=fuzzer,address,undefined -g -O1)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  if(NOT ARG_RUNS)
    set(ARG_RUNS 20000)
  endif()
  set(work ${CMAKE_CURRENT_BINARY_DIR}/${name}_corpus)
  add_test(NAME ${name}
    COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=1
      sh -c "rm -rf '${work}' && mkdir -p '${work}' && cp -r '${ARG_CORPUS}/.' '${work}/' && exec \"$0\" -runs=${ARG_RUNS} -max_len=65536 -rss_limit_mb=1024 -timeout=10 '${work}' '${ARG_CORPUS}'" $<TARGET_FILE:${name}>)
  set_tests_properties(${name} PROPERTIES LABELS "fuzz" TIMEOUT 300)
endfunction()
