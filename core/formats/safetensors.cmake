# owned by the safetensors engineer
modelfs_library(modelfs_safetensors
  SOURCES safetensors.cc safetensors_dtypes.cc safetensors_writer.cc sharded_index.cc
  DEPS modelfs_io modelfs_status modelfs_text nlohmann_json::nlohmann_json absl::strings)
