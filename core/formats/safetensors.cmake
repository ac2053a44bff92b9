# owned by the safetensors engineer
modelfs_library(modelfs_safetensors
  SOURCES safetensors.cc sharded_index.cc
  DEPS modelfs_io modelfs_status nlohmann_json::nlohmann_json absl::strings)
