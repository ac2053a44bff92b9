// A test binary whose only test always lacks its component: the two CTest entries around it
// (testsupport/testing/CMakeLists.txt) prove the rule of testsupport/testing/skip.h. Without
// CI=true the binary prints the all-skipped marker, which CTest turns into "skipped", never
// "passed"; with CI=true the missing component is a failure.
#include "gtest/gtest.h"
#include "testsupport/testing/skip.h"

namespace modelfs::testing {
namespace {

TEST(SkipProbe, AMissingComponent) {
  SKIP_OR_FAIL_IF_UNAVAILABLE("a component this probe never has");
  ADD_FAILURE() << "not reached";
}

}  // namespace
}  // namespace modelfs::testing
