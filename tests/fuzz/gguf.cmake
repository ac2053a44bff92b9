# gguf_fuzz: ParseGguf on arbitrary bytes, then the JSON view and a peek at the first tensor.
modelfs_fuzzer(gguf_fuzz
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/gguf_fuzz.cc
  INSTRUMENT
    ${PROJECT_SOURCE_DIR}/core/formats/gguf.cc
    ${PROJECT_SOURCE_DIR}/core/formats/gguf_file.cc
    ${PROJECT_SOURCE_DIR}/core/text/utf8.cc
    ${PROJECT_SOURCE_DIR}/core/formats/ggml_types.cc
    ${PROJECT_SOURCE_DIR}/core/formats/dequant.cc
    ${PROJECT_SOURCE_DIR}/core/io/header_cursor.cc
    ${PROJECT_SOURCE_DIR}/core/io/range_reader.cc
    ${PROJECT_SOURCE_DIR}/core/io/http_range_reader.cc
  DEPS modelfs_status nlohmann_json::nlohmann_json absl::strings modelfs_http
  CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/corpus/gguf
  RUNS 20000)
