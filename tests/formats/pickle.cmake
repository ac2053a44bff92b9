modelfs_test(pickle_scan_test
  SOURCES pickle_scan_test.cc
  DEPS modelfs_pickle modelfs_fake_hub_fixture)
