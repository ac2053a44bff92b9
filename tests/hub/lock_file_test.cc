// modelfs.lock.json: its exact bytes, what a parser refuses, and VerifyDirectory's verdicts.
#include "core/hub/lock_file.h"

#include <filesystem>

#include "core/oci/digest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

LockFile Sample() {
  LockFile l;
  l.endpoint = "https://huggingface.co";
  l.repo = "org/tiny";
  l.revision = "main";
  l.commit = std::string(40, 'a');
  l.files.push_back({"model.safetensors", 5, std::string(Digest::Of("hello").hex()), true, ""});
  l.files.push_back(
      {"config.json", 2, std::string(Digest::Of("{}").hex()), false, std::string(40, 'b')});
  return l;
}

TEST(LockFileTest, SerializesInTheDocumentedShapeWithFilesSortedByPath) {
  EXPECT_EQ(
      SerializeLockFile(Sample()),
      "{\n"
      "  \"version\": 1,\n"
      "  \"endpoint\": \"https://huggingface.co\",\n"
      "  \"repo\": \"org/tiny\",\n"
      "  \"revision\": \"main\",\n"
      "  \"commit\": \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\",\n"
      "  \"files\": [\n"
      "    {\n"
      "      \"path\": \"config.json\",\n"
      "      \"size\": 2,\n"
      "      \"sha256\": \"44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a\",\n"
      "      \"lfs\": false,\n"
      "      \"gitBlobSha1\": \"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\"\n"
      "    },\n"
      "    {\n"
      "      \"path\": \"model.safetensors\",\n"
      "      \"size\": 5,\n"
      "      \"sha256\": \"2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824\",\n"
      "      \"lfs\": true\n"
      "    }\n"
      "  ]\n"
      "}\n");
}

TEST(LockFileTest, RoundTrips) {
  LockFile l = Sample();
  ASSERT_OK_AND_ASSIGN(LockFile back, ParseLockFile(SerializeLockFile(l), "lock"));
  std::sort(l.files.begin(), l.files.end(),
            [](const LockedFile& a, const LockedFile& b) { return a.path < b.path; });
  EXPECT_EQ(back, l);
}

TEST(LockFileTest, RefusesWhatCannotBeAPin) {
  auto parse = [](const std::string& s) { return ParseLockFile(s, "modelfs.lock.json"); };
  const std::string sha(64, 'a');
  const std::string commit(40, 'c');
  EXPECT_THAT(parse("[]"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a JSON")));
  EXPECT_THAT(parse(R"({"version": 2, "repo": "a/b", "commit": ")" + commit + R"(", "files": []})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(".version")));
  EXPECT_THAT(parse(R"({"version": 1, "repo": "a/b", "commit": "main", "files": []})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a full commit hash")));
  EXPECT_THAT(
      parse(R"({"version": 1, "repo": "a/b/c", "commit": ")" + commit + R"(", "files": []})"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(".repo")));
  EXPECT_THAT(parse(R"({"version": 1, "repo": "a/b", "commit": ")" + commit +
                    R"(", "files": [{"path": "../x", "size": 1, "sha256": ")" + sha + R"("}]})"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("files[0].path")));
  EXPECT_THAT(parse(R"({"version": 1, "repo": "a/b", "commit": ")" + commit +
                    R"(", "files": [{"path": "x", "size": -1, "sha256": ")" + sha + R"("}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("files[0].size")));
  EXPECT_THAT(parse(R"({"version": 1, "repo": "a/b", "commit": ")" + commit +
                    R"(", "files": [{"path": "x", "size": 1, "sha256": "ABC"}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("files[0].sha256")));
  EXPECT_THAT(parse(R"({"version": 1, "repo": "a/b", "commit": ")" + commit +
                    R"(", "files": [{"path": "x", "size": 1, "sha256": ")" + sha +
                    R"("}, {"path": "x", "size": 1, "sha256": ")" + sha + R"("}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("appears twice")));
}

class VerifyDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_.WriteFile("model.safetensors", "hello");
    tmp_.WriteFile("config.json", "{}");
    tmp_.WriteFile("modelfs.lock.json", SerializeLockFile(Sample()));
  }
  TempDir tmp_;
};

TEST_F(VerifyDirectoryTest, AnUntouchedDirectoryVerifies) {
  ASSERT_OK_AND_ASSIGN(VerifyReport r, VerifyDirectory(tmp_.path().string()));
  EXPECT_TRUE(r.ok());
  ASSERT_EQ(r.files.size(), 2u);
  EXPECT_EQ(r.files[0].state, LockCheck::State::kOk);
  EXPECT_EQ(r.bytes, 7u);
  EXPECT_TRUE(r.extra.empty());
}

TEST_F(VerifyDirectoryTest, ChangedSameSizeBytesAreADigestMismatch) {
  tmp_.WriteFile("model.safetensors", "jello");
  ASSERT_OK_AND_ASSIGN(VerifyReport r, VerifyDirectory(tmp_.path().string()));
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.files[1].path, "model.safetensors");
  EXPECT_EQ(r.files[1].state, LockCheck::State::kDigestMismatch);
  EXPECT_EQ(r.files[1].sha256, Digest::Of("jello").hex());
}

TEST_F(VerifyDirectoryTest, SizeMissingLinksAndExtrasAreReported) {
  tmp_.WriteFile("config.json", "{ }");
  fs::remove(tmp_.path() / "model.safetensors");
  fs::create_symlink("/etc/hostname", tmp_.path() / "model.safetensors");
  tmp_.WriteFile("sub/extra.txt", "x");
  ASSERT_OK_AND_ASSIGN(VerifyReport r, VerifyDirectory(tmp_.path().string()));
  EXPECT_EQ(r.files[0].state, LockCheck::State::kSizeMismatch);
  EXPECT_EQ(r.files[1].state, LockCheck::State::kNotRegular);
  EXPECT_THAT(r.extra, ElementsAre("sub/extra.txt"));
  fs::remove(tmp_.path() / "model.safetensors");
  ASSERT_OK_AND_ASSIGN(VerifyReport r2, VerifyDirectory(tmp_.path().string()));
  EXPECT_EQ(r2.files[1].state, LockCheck::State::kMissing);
}

TEST_F(VerifyDirectoryTest, ADirectoryWithoutALockIsNotFound) {
  fs::remove(tmp_.path() / "modelfs.lock.json");
  EXPECT_THAT(VerifyDirectory(tmp_.path().string()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("has no modelfs.lock.json")));
}

}  // namespace
}  // namespace modelfs::testing
