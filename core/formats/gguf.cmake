# modelfs_gguf: the ggml type table, the GGUF parser and writer, and dequantization for --peek.
modelfs_library(modelfs_gguf
  SOURCES
    ggml_types.cc
    gguf.cc
    gguf_file.cc
    gguf_writer.cc
    dequant.cc
  DEPS modelfs_io modelfs_status modelfs_text nlohmann_json::nlohmann_json absl::strings)
