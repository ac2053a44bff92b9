# The pickle scanner (core/formats/pickle_scan.h): zip checkpoints and raw pickle streams.
modelfs_fuzzer(pickle_fuzz
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/pickle_fuzz.cc
  INSTRUMENT
    ${PROJECT_SOURCE_DIR}/core/formats/pickle_scan.cc
    ${PROJECT_SOURCE_DIR}/core/formats/pickle_machine.cc
    ${PROJECT_SOURCE_DIR}/core/io/range_reader.cc
    ${PROJECT_SOURCE_DIR}/core/io/header_cursor.cc
    ${PROJECT_SOURCE_DIR}/core/io/http_range_reader.cc
    ${PROJECT_SOURCE_DIR}/core/text/escape.cc
    ${PROJECT_SOURCE_DIR}/core/text/utf8.cc
    ${PROJECT_SOURCE_DIR}/core/text/base_name.cc
    ${PROJECT_SOURCE_DIR}/cmd/modelfs/pickle_render.cc
  DEPS modelfs_status nlohmann_json::nlohmann_json absl::strings absl::str_format modelfs_http
  CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/corpus/pickle
  RUNS 20000)
