# core/publish fuzz targets: the tar follower that indexes the weight files inside a layer's tar
# as it streams (a modelcar's layers come from anyone who can push an image).
modelfs_fuzzer(publish_tar_tensor_indexer_fuzz
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/publish_tar_tensor_indexer_fuzz.cc
  INSTRUMENT ${PROJECT_SOURCE_DIR}/core/publish/tar_tensor_indexer.cc
  DEPS modelfs_publish modelfs_oci modelfs_status absl::strings
  CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/corpus/publish_tar_tensor_indexer
  RUNS 20000)
