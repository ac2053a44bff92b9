// main() of every modelfs test binary: GoogleTest's, plus one marker line when every test that
// ran was skipped and none failed. CTest's SKIP_REGULAR_EXPRESSION (cmake/modelfs.cmake) keys
// on that line, so a binary that tested nothing shows as skipped, not passed. GoogleTest's own
// "[  SKIPPED ]" lines cannot serve: they also appear next to a failure, which must stay one.
#include <cstdio>

#include "gtest/gtest.h"

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MODELFS_TEST_TSAN 1
#include <sanitizer/common_interface_defs.h>
#endif
#endif

namespace {

// The ThreadSanitizer tree (scripts/tsan.sh). TSan symbolizes every report, even one that a
// suppression then hides, with llvm-symbolizer, started at first use by a fork whose child
// closes each inherited descriptor before exec. In a FUSE test, closing a file of the test's own
// mount waits for a FLUSH answer from this process's FUSE threads, which can be blocked behind
// the reporting thread: the test hung. Started here, before any mount, the symbolizer is reused.
void StartSanitizerSymbolizer() {
#ifdef MODELFS_TEST_TSAN
  char name[128];
  __sanitizer_symbolize_pc(reinterpret_cast<void*>(&StartSanitizerSymbolizer), "%f", name,
                           sizeof(name));
#endif
}

}  // namespace

int main(int argc, char** argv) {
  StartSanitizerSymbolizer();
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const ::testing::UnitTest& u = *::testing::UnitTest::GetInstance();
  if (rc == 0 && u.failed_test_count() == 0 && u.test_to_run_count() > 0 &&
      u.skipped_test_count() == u.test_to_run_count() && !u.ad_hoc_test_result().Failed()) {
    printf("modelfs-test: every test was skipped\n");
    fflush(stdout);
  }
  return rc;
}
