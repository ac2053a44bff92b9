# core/http fuzz targets: the Content-Range header, which every range answer's server writes.
modelfs_fuzzer(http_content_range_fuzz
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/http_content_range_fuzz.cc
  INSTRUMENT ${PROJECT_SOURCE_DIR}/core/http/content_range.cc
  DEPS absl::strings
  CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/corpus/http_content_range
  RUNS 20000)
