# modelfs_gguf: the ggml type table, the GGUF parser and writer, dequantization for --peek,
# and the synthetic models used by tests, the README demo and benchmarks.
modelfs_library(modelfs_gguf
  SOURCES
    ggml_types.cc
    gguf.cc
    gguf_writer.cc
    dequant.cc
    synthetic_models.cc
  DEPS modelfs_io modelfs_status nlohmann_json::nlohmann_json absl::strings)
