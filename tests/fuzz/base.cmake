# core/base fuzz targets: the log encoders, which write registry errors, snapshot keys and
# artifact names that others chose.
modelfs_fuzzer(base_log_event_fuzz
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/base_log_event_fuzz.cc
  INSTRUMENT
    ${PROJECT_SOURCE_DIR}/core/base/log_event.cc
    ${PROJECT_SOURCE_DIR}/core/text/escape.cc
  DEPS modelfs_text nlohmann_json::nlohmann_json absl::strings absl::time
  CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/corpus/base_log_event
  RUNS 20000)
