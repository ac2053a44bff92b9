// FetchModel against an in-memory Hub: what gets downloaded, how it is verified, what the lock
// records, and that a failure leaves the destination as it was.
#include "core/hub/fetch.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testsupport/fakes/fake_hub_source.h"
#include "testsupport/hub/hub_test_model.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kCommitA[] = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
constexpr char kCommitB[] = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

std::string Read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> Listing(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return out;
  for (auto& e : fs::recursive_directory_iterator(dir)) {
    out.push_back(fs::relative(e.path(), dir).generic_string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

class FetchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    files_ = TinyRepoFiles();
    files_["pytorch_model.bin"] = "\x80\x02pickle bytes";
    files_["modeling_x.py"] = "print('hi')\n";
    hub_.repos["org/tiny"].commits[kCommitA] = files_;
    hub_.repos["org/tiny"].refs["main"] = {kCommitA};
  }

  FetchOptions Options() {
    FetchOptions o;
    o.repo = "org/tiny";
    o.revision = kCommitA;
    o.dest = (tmp_.path() / "out").string();
    return o;
  }

  std::map<std::string, std::string> files_;
  FakeHubSource hub_;
  TempDir tmp_;
};

TEST_F(FetchTest, PinnedFetchDownloadsTheDefaultFilesAndWritesTheLock) {
  ASSERT_OK_AND_ASSIGN(FetchResult r, FetchModel(hub_, Options()));
  EXPECT_EQ(r.commit, kCommitA);
  EXPECT_FALSE(r.resolved);
  const fs::path out = tmp_.path() / "out";
  EXPECT_THAT(Listing(out),
              ElementsAre("README.md", "config.json", "generation_config.json", "model.safetensors",
                          "modelfs.lock.json", "tokenizer.json", "tokenizer_config.json"));
  for (const auto& [path, bytes] : files_) {
    if (fs::exists(out / path)) {
      EXPECT_EQ(Read(out / path), bytes) << path;
    }
  }
  ASSERT_OK_AND_ASSIGN(LockFile lock, ReadLockFile((out / "modelfs.lock.json").string()));
  EXPECT_EQ(lock.repo, "org/tiny");
  EXPECT_EQ(lock.commit, kCommitA);
  EXPECT_EQ(lock.revision, kCommitA);
  EXPECT_EQ(lock.endpoint, "https://hub.example");
  ASSERT_EQ(lock.files.size(), 6u);
  const LockedFile* st = lock.Find("model.safetensors");
  ASSERT_NE(st, nullptr);
  EXPECT_EQ(st->size, files_["model.safetensors"].size());
  EXPECT_EQ(st->sha256, Digest::Of(files_["model.safetensors"]).hex());
  EXPECT_TRUE(st->lfs);
  EXPECT_EQ(st->git_blob_sha1, "");
  const LockedFile* cfg = lock.Find("config.json");
  ASSERT_NE(cfg, nullptr);
  EXPECT_FALSE(cfg->lfs);
  EXPECT_EQ(cfg->git_blob_sha1, GitBlobSha1Hex(files_["config.json"]));
  EXPECT_EQ(cfg->sha256, Digest::Of(files_["config.json"]).hex());
}

TEST_F(FetchTest, ConfigJsonIsDownloadedFirst) {
  ASSERT_OK(FetchModel(hub_, Options()).status());
  ASSERT_FALSE(hub_.downloads.empty());
  EXPECT_EQ(hub_.downloads.front(), "config.json");
}

TEST_F(FetchTest, EachFileSaysWhatVerifiedIt) {
  ASSERT_OK_AND_ASSIGN(FetchResult r, FetchModel(hub_, Options()));
  for (const FetchedFile& f : r.files) {
    if (f.path == "model.safetensors") {
      EXPECT_EQ(f.verified_by, "sha256 (lfs.sha256, X-Linked-Etag)");
    } else if (f.path == "config.json") {
      EXPECT_EQ(f.verified_by, "git blob sha1 (blobId, ETag)");
    }
  }
}

TEST_F(FetchTest, ABranchNameIsRefusedNamingItsCommit) {
  FetchOptions o = Options();
  o.revision = "main";
  EXPECT_THAT(FetchModel(hub_, o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'main' is a branch or tag name"),
                             HasSubstr(absl::StrCat("--revision ", kCommitA)))));
  EXPECT_THAT(hub_.downloads, IsEmpty());
  EXPECT_FALSE(fs::exists(tmp_.path() / "out"));
}

TEST_F(FetchTest, ResolveAcceptsABranchAndReportsTheCommit) {
  FetchOptions o = Options();
  o.revision = "main";
  o.resolve = true;
  ASSERT_OK_AND_ASSIGN(FetchResult r, FetchModel(hub_, o));
  EXPECT_TRUE(r.resolved);
  EXPECT_EQ(r.commit, kCommitA);
  ASSERT_OK_AND_ASSIGN(LockFile lock,
                       ReadLockFile((tmp_.path() / "out" / "modelfs.lock.json").string()));
  EXPECT_EQ(lock.revision, "main");
  EXPECT_EQ(lock.commit, kCommitA);
}

TEST_F(FetchTest, ABranchThatMovesAfterResolutionDoesNotChangeWhatIsFetched) {
  std::map<std::string, std::string> b = files_;
  b["model.safetensors"] = TinySafetensors(99);
  hub_.repos["org/tiny"].commits[kCommitB] = b;
  hub_.repos["org/tiny"].refs["main"] = {kCommitA, kCommitB};  // moves after the first call
  FetchOptions o = Options();
  o.revision = "main";
  o.resolve = true;
  ASSERT_OK_AND_ASSIGN(FetchResult r, FetchModel(hub_, o));
  EXPECT_EQ(r.commit, kCommitA);
  EXPECT_EQ(Read(tmp_.path() / "out" / "model.safetensors"), files_["model.safetensors"]);
  // A second fetch sees the branch at its new commit.
  o.dest = (tmp_.path() / "out2").string();
  ASSERT_OK_AND_ASSIGN(FetchResult r2, FetchModel(hub_, o));
  EXPECT_EQ(r2.commit, kCommitB);
  EXPECT_EQ(Read(tmp_.path() / "out2" / "model.safetensors"), b["model.safetensors"]);
}

TEST_F(FetchTest, AnAnswerForAnotherCommitIsRefused) {
  hub_.stated_commit["model.safetensors"] = kCommitB;
  EXPECT_THAT(FetchModel(hub_, Options()),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr(absl::StrCat("answered for commit ", kCommitB))));
  EXPECT_FALSE(fs::exists(tmp_.path() / "out"));
}

TEST_F(FetchTest, TamperedLfsBytesFailAndLeaveNothingBehind) {
  hub_.tamper["model.safetensors"] = 100;
  EXPECT_THAT(
      FetchModel(hub_, Options()),
      StatusIs(absl::StatusCode::kDataLoss,
               AllOf(HasSubstr("model.safetensors: failed verification"),
                     HasSubstr(std::string(Digest::Of(files_["model.safetensors"]).hex())))));
  EXPECT_FALSE(fs::exists(tmp_.path() / "out"));
  EXPECT_THAT(Listing(tmp_.path()), IsEmpty());  // no staging directory either
}

TEST_F(FetchTest, TamperedSmallFileFailsOnItsGitBlobId) {
  hub_.tamper["tokenizer.json"] = 3;
  EXPECT_THAT(FetchModel(hub_, Options()),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("git blob id")));
}

TEST_F(FetchTest, AFailureLeavesAnExistingDestinationAsItWas) {
  const fs::path out = tmp_.path() / "out";
  fs::create_directories(out);
  tmp_.WriteFile("out/config.json", "mine");
  hub_.tamper["model.safetensors"] = 0;
  EXPECT_THAT(FetchModel(hub_, Options()), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(Listing(out), ElementsAre("config.json"));
  EXPECT_EQ(Read(out / "config.json"), "mine");
}

TEST_F(FetchTest, AnExistingDestinationGetsTheFilesAndKeepsOthers) {
  const fs::path out = tmp_.path() / "out";
  tmp_.WriteFile("out/notes.txt", "keep me");
  tmp_.WriteFile("out/config.json", "old");
  ASSERT_OK(FetchModel(hub_, Options()).status());
  EXPECT_EQ(Read(out / "notes.txt"), "keep me");
  EXPECT_EQ(Read(out / "config.json"), files_["config.json"]);
  EXPECT_TRUE(fs::exists(out / "modelfs.lock.json"));
}

TEST_F(FetchTest, AListingThatDisagreesWithTheAnswerIsRefusedBeforeAnyByte) {
  hub_.stated_etag["model.safetensors"] = std::string(64, 'e');
  EXPECT_THAT(
      FetchModel(hub_, Options()),
      StatusIs(absl::StatusCode::kDataLoss,
               AllOf(HasSubstr("X-Linked-Etag states sha256 eeee"), HasSubstr("lfs.sha256"))));
}

TEST_F(FetchTest, AutoMapIsRefusedBeforeTheWeights) {
  hub_.repos["org/tiny"].commits[kCommitA]["config.json"] = TinyConfigJson(/*auto_map=*/true);
  EXPECT_THAT(
      FetchModel(hub_, Options()),
      StatusIs(absl::StatusCode::kPermissionDenied,
               AllOf(HasSubstr("auto_map"), HasSubstr("AutoConfig -> configuration_x.XConfig"),
                     HasSubstr("--allow-remote-code"))));
  EXPECT_THAT(hub_.downloads, ElementsAre("config.json"));
  EXPECT_FALSE(fs::exists(tmp_.path() / "out"));
}

TEST_F(FetchTest, AllowRemoteCodeFetchesTheCodeToo) {
  hub_.repos["org/tiny"].commits[kCommitA]["config.json"] = TinyConfigJson(/*auto_map=*/true);
  FetchOptions o = Options();
  o.allow_remote_code = true;
  ASSERT_OK_AND_ASSIGN(FetchResult r, FetchModel(hub_, o));
  EXPECT_TRUE(fs::exists(tmp_.path() / "out" / "modeling_x.py"));
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_THAT(r.notes[0], HasSubstr("auto_map"));
}

TEST_F(FetchTest, PickleFilesAreSkippedByDefaultAndReported) {
  FetchOptions o = Options();
  o.include = {"*"};
  ASSERT_OK_AND_ASSIGN(FetchResult r, FetchModel(hub_, o));
  EXPECT_THAT(r.skipped_pickle, ElementsAre("pytorch_model.bin"));
  EXPECT_FALSE(fs::exists(tmp_.path() / "out" / "pytorch_model.bin"));
  EXPECT_TRUE(fs::exists(tmp_.path() / "out" / "modeling_x.py"));  // --include replaces defaults
}

TEST_F(FetchTest, ANamedPickleFileIsRefusedWithoutAllowPickle) {
  FetchOptions o = Options();
  o.files = {"pytorch_model.bin"};
  EXPECT_THAT(FetchModel(hub_, o),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("pickle checkpoint")));
  o.allow_pickle = true;
  ASSERT_OK_AND_ASSIGN(FetchResult r, FetchModel(hub_, o));
  ASSERT_EQ(r.files.size(), 1u);
  EXPECT_EQ(r.files[0].path, "pytorch_model.bin");
}

TEST_F(FetchTest, NamedFilesAreTheOnlyOnesFetched) {
  FetchOptions o = Options();
  o.files = {"tokenizer.json"};
  ASSERT_OK_AND_ASSIGN(FetchResult r, FetchModel(hub_, o));
  EXPECT_THAT(Listing(tmp_.path() / "out"), ElementsAre("modelfs.lock.json", "tokenizer.json"));
  // config.json was still read for the remote-code check, and is not kept.
  EXPECT_EQ(hub_.downloads.front(), "config.json");
}

TEST_F(FetchTest, ExcludeRemovesFromTheSelection) {
  FetchOptions o = Options();
  o.exclude = {"*.md", "tokenizer*"};
  ASSERT_OK(FetchModel(hub_, o).status());
  EXPECT_THAT(Listing(tmp_.path() / "out"), ElementsAre("config.json", "generation_config.json",
                                                        "model.safetensors", "modelfs.lock.json"));
}

TEST_F(FetchTest, AMissingFileIsNotFound) {
  FetchOptions o = Options();
  o.files = {"nope.json"};
  EXPECT_THAT(FetchModel(hub_, o),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no file 'nope.json'")));
}

TEST_F(FetchTest, AMissingRevisionIsNotFound) {
  FetchOptions o = Options();
  o.revision = std::string(40, 'c');
  EXPECT_THAT(FetchModel(hub_, o), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(FetchTest, APathThatEscapesIsRefused) {
  hub_.repos["org/tiny"].commits[kCommitA]["../evil.json"] = "{}";
  EXPECT_THAT(FetchModel(hub_, Options()),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("../evil.json")));
  EXPECT_THAT(Listing(tmp_.path()), IsEmpty());
}

TEST_F(FetchTest, AnInvalidSafetensorsHeaderIsRefused) {
  std::string bad = TinySafetensors();
  bad.resize(bad.size() - 4);  // the tensors no longer tile the file
  hub_.repos["org/tiny"].commits[kCommitA]["model.safetensors"] = bad;
  EXPECT_THAT(
      FetchModel(hub_, Options()),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model.safetensors: invalid header")));
  EXPECT_FALSE(fs::exists(tmp_.path() / "out"));
}

TEST_F(FetchTest, AGgufHeaderIsValidatedToo) {
  hub_.repos["org/tiny"].commits[kCommitA]["tiny.gguf"] = TinyGguf();
  ASSERT_OK(FetchModel(hub_, Options()).status());
  hub_.repos["org/tiny"].commits[kCommitA]["tiny.gguf"] = "GGUF\x03\0\0\0garbage";
  FetchOptions o = Options();
  o.dest = (tmp_.path() / "out2").string();
  EXPECT_THAT(FetchModel(hub_, o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tiny.gguf: invalid header")));
}

TEST_F(FetchTest, ATransientFailureIsRetriedFromTheStart) {
  hub_.fail_downloads = 1;
  ASSERT_OK(FetchModel(hub_, Options()).status());
  EXPECT_EQ(Read(tmp_.path() / "out" / "config.json"), files_["config.json"]);
}

TEST_F(FetchTest, TheLockFetchesExactlyItsFiles) {
  FetchOptions first = Options();
  first.files = {"tokenizer.json", "model.safetensors"};
  ASSERT_OK_AND_ASSIGN(FetchResult r, FetchModel(hub_, first));
  ASSERT_OK_AND_ASSIGN(LockFile lock,
                       ReadLockFile((tmp_.path() / "out" / "modelfs.lock.json").string()));
  FetchOptions again;
  again.lock = lock;
  again.dest = (tmp_.path() / "again").string();
  ASSERT_OK(FetchModel(hub_, again).status());
  EXPECT_THAT(Listing(tmp_.path() / "again"),
              ElementsAre("model.safetensors", "modelfs.lock.json", "tokenizer.json"));
  EXPECT_EQ(Read(tmp_.path() / "again" / "modelfs.lock.json"),
            Read(tmp_.path() / "out" / "modelfs.lock.json"));
}

TEST_F(FetchTest, ALockWhoseHashTheHubNoLongerMatchesIsRefused) {
  LockFile lock;
  lock.repo = "org/tiny";
  lock.commit = kCommitA;
  lock.files.push_back(
      {"model.safetensors", files_["model.safetensors"].size(), std::string(64, '0'), true, ""});
  FetchOptions o;
  o.lock = lock;
  o.dest = (tmp_.path() / "out").string();
  EXPECT_THAT(FetchModel(hub_, o),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("the lock states sha256 0000")));
}

TEST_F(FetchTest, AGatedRepositoryWithoutATokenIsPermissionDenied) {
  hub_.repos["org/tiny"].gated = true;
  EXPECT_THAT(FetchModel(hub_, Options()),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("HF_TOKEN")));
  hub_.token = "hf_ok";
  EXPECT_OK(FetchModel(hub_, Options()).status());
}

TEST_F(FetchTest, AListingWithoutSizesUsesTheSizeTheHubStates) {
  hub_.edit_listing = [](HubRevision& r) {
    for (HubFile& f : r.files) {
      if (!f.lfs) f.size.reset();
    }
  };
  ASSERT_OK_AND_ASSIGN(FetchResult r, FetchModel(hub_, Options()));
  for (const FetchedFile& f : r.files) EXPECT_EQ(f.size, files_[f.path].size()) << f.path;
}

TEST_F(FetchTest, ABadRepositoryIdIsInvalid) {
  FetchOptions o = Options();
  o.repo = "../etc";
  EXPECT_THAT(FetchModel(hub_, o), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace modelfs::testing
