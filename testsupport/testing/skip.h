// Skipping a test that needs a component this machine lacks (root, /dev/fuse, containerd, the
// snapshotter binary, the source tree), without letting a CI run pass by skipping: with CI=true
// in the environment the same test fails instead, naming what is missing.
//
// A setup step that fails (a registry that does not start, a push that exits 1) is a failure,
// never a skip: use ASSERT_* / GTEST_FAIL for those.
//
// Thread safety: call from the test's thread.
#pragma once

#include <string>

#include "gtest/gtest.h"

namespace modelfs::testing {

// True when $CI is "true" (GitHub Actions, GitLab CI and most runners set it).
bool InCi();

}  // namespace modelfs::testing

// Skips the current test (or fails it when InCi()) if `why` is not empty; returns from the
// calling function either way. Use in SetUp() or a TEST body.
#define SKIP_OR_FAIL_IF_UNAVAILABLE(why)                                    \
  do {                                                                      \
    const std::string modelfs_unavailable_ = (why);                         \
    if (!modelfs_unavailable_.empty()) {                                    \
      if (::modelfs::testing::InCi()) {                                     \
        GTEST_FAIL() << "CI=true, where a missing component is a failure: " \
                     << modelfs_unavailable_;                               \
      }                                                                     \
      GTEST_SKIP() << modelfs_unavailable_;                                 \
    }                                                                       \
  } while (0)
