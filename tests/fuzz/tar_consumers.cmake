# The consumers of the one tar follower (core/oci/tar_follower.h), differentially: the reader
# (ScanTarHeaders), the header recorder, the cache's TarSplitWriter and publish's
# TarTensorIndexer must agree on every input.
modelfs_fuzzer(tar_consumers_fuzz
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/tar_consumers_fuzz.cc
  INSTRUMENT
    ${PROJECT_SOURCE_DIR}/core/oci/tar_follower.cc
    ${PROJECT_SOURCE_DIR}/core/oci/tar.cc
    ${PROJECT_SOURCE_DIR}/core/oci/tar_headers.cc
    ${PROJECT_SOURCE_DIR}/core/cache/tar_split_writer.cc
    ${PROJECT_SOURCE_DIR}/core/publish/tar_tensor_indexer.cc
  DEPS modelfs_publish modelfs_cache modelfs_inspect modelfs_oci modelfs_status absl::strings
  CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/corpus/tar_consumers
  RUNS 2000)  # each run writes a data file and a member file per regular file: ~60 a second
