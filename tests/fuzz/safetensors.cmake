# owned by the safetensors engineer
modelfs_fuzzer(safetensors_fuzz
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/safetensors_fuzz.cc
  INSTRUMENT
    ${PROJECT_SOURCE_DIR}/core/formats/safetensors.cc
    ${PROJECT_SOURCE_DIR}/core/formats/safetensors_dtypes.cc
    ${PROJECT_SOURCE_DIR}/core/formats/safetensors_writer.cc
    ${PROJECT_SOURCE_DIR}/core/text/utf8.cc
    ${PROJECT_SOURCE_DIR}/core/text/escape.cc
    ${PROJECT_SOURCE_DIR}/core/io/header_cursor.cc
    ${PROJECT_SOURCE_DIR}/core/io/range_reader.cc
    ${PROJECT_SOURCE_DIR}/core/io/http_range_reader.cc
  DEPS modelfs_status nlohmann_json::nlohmann_json absl::strings absl::str_format modelfs_http
  CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/corpus/safetensors
  RUNS 20000)
