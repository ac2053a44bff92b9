# modelfs_pickle: the pickle scanner (imports and calls of a pickle checkpoint, never executed).
modelfs_library(modelfs_pickle
  SOURCES pickle_scan.cc pickle_machine.cc
  DEPS modelfs_io modelfs_text modelfs_status nlohmann_json::nlohmann_json absl::strings
       absl::str_format)
