// How `modelfs inspect` prints a pickle scan, as text and as JSON.
#include "cmd/modelfs/pickle_render.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testsupport/hub/pickle_test_files.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs::testing {
namespace {

using ::testing::HasSubstr;

TEST(PickleScanTest, TextAndJsonNameTheFlaggedImportAndItsOsAlias) {
  ASSERT_OK_AND_ASSIGN(PickleScan scan, ScanPickleBytes(OsSystemPickle(2), "evil.pkl"));
  const std::string text = cli::RenderPickleScan(scan);
  EXPECT_THAT(text, HasSubstr("evil.pkl: pickle stream, 1 pickle (pickle, 34 bytes, protocol 2), "
                              "nothing executed"));
  EXPECT_THAT(text, HasSubstr("posix.system (os.system)"));
  EXPECT_THAT(text, HasSubstr("DANGEROUS"));
  EXPECT_THAT(text, HasSubstr("verdict: 1 flagged: posix.system"));
  nlohmann::json j = cli::PickleScanToJson(scan);
  EXPECT_EQ(j["safe"], false);
  EXPECT_EQ(j["streams"][0]["imports"][0]["alias"], "os.system");
  EXPECT_EQ(j["flagged"][0], "posix.system");
}

}  // namespace
}  // namespace modelfs::testing
