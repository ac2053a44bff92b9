# modelfs_gguf: the ggml type table, the GGUF parser and writer, dequantization for --peek, and
# the GGUF <-> Hugging Face tensor name map (tensor_names.cc).
modelfs_library(modelfs_gguf
  SOURCES
    ggml_types.cc
    gguf.cc
    gguf_file.cc
    gguf_writer.cc
    dequant.cc
    tensor_names.cc
  DEPS modelfs_io modelfs_status modelfs_text nlohmann_json::nlohmann_json absl::strings)
