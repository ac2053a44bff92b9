modelfs_test(gguf_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/gguf_test.cc
  DEPS modelfs_gguf)
modelfs_test(gguf_writer_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/gguf_writer_test.cc
  DEPS modelfs_gguf)
modelfs_test(ggml_types_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/ggml_types_test.cc
  DEPS modelfs_gguf)
modelfs_test(dequant_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/dequant_test.cc
  DEPS modelfs_gguf modelfs_synth)
modelfs_test(synthetic_models_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/synthetic_models_test.cc
  DEPS modelfs_gguf modelfs_synth)
modelfs_test(tensor_names_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/tensor_names_test.cc
  DEPS modelfs_gguf)
