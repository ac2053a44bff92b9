# owned by the safetensors engineer
modelfs_test(safetensors_test
  SOURCES safetensors_test.cc
  DEPS modelfs_safetensors)
modelfs_test(sharded_index_test
  SOURCES sharded_index_test.cc
  DEPS modelfs_safetensors)
