modelfs_test(model_shape_test SOURCES model_shape_test.cc DEPS modelfs_shape)
modelfs_test(memory_test SOURCES memory_test.cc DEPS modelfs_shape)
