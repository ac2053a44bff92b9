# modelfs_shape: the architecture numbers of a model (config.json / GGUF metadata) and the
# serving-memory arithmetic built on them (weights per format, KV cache, GPU fit).
modelfs_library(modelfs_shape
  SOURCES
    model_shape.cc
    memory.cc
  DEPS
    modelfs_status
    modelfs_text
    modelfs_gguf  # the ggml type table (ggml_types.cc)
    nlohmann_json::nlohmann_json
    absl::strings
    absl::str_format
)
