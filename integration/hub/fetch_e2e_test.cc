// `modelfs fetch` and `modelfs verify`, the binary, against the fake Hub
// (testsupport/fakes/fake_hub.py): a pinned fetch and its lock file field by field, branch
// names, a tampered CDN, a gated repository, remote code, missing files and revisions, a
// branch that moves, and `fetch --lock`.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/hub/git_blob.h"
#include "core/oci/digest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/hub/fake_hub_fixture.h"
#include "testsupport/hub/hub_test_model.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kCommitA[] = "1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d";
constexpr char kCommitB[] = "b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0";
constexpr int kLfsThreshold = 1024;

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

// One error line on stderr, "modelfs: ...", and nothing that looks like a trace.
void ExpectOneErrorLine(const ProcessResult& r) {
  EXPECT_THAT(r.err, StartsWith("modelfs: "));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

class FetchE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto hub = FakeHub::Start();
    ASSERT_OK(hub.status());
    hub_ = hub->release();
    files_ = new std::map<std::string, std::string>(TinyRepoFiles(1));
    (*files_)["pytorch_model.bin"] = "\x80\x02}q\x00.";
    (*files_)["tiny.gguf"] = TinyGguf(1);
    auto a = hub_->WriteCommit("a", *files_);
    ASSERT_OK(a.status());
    dir_a_ = new std::string(*a);
    std::map<std::string, std::string> b = *files_;
    b["model.safetensors"] = TinySafetensors(2);
    auto bdir = hub_->WriteCommit("b", b);
    ASSERT_OK(bdir.status());
    dir_b_ = new std::string(*bdir);
    std::map<std::string, std::string> remote = *files_;
    remote["config.json"] = TinyConfigJson(/*auto_map=*/true);
    remote["modeling_x.py"] = "import os\n";
    auto rdir = hub_->WriteCommit("remote", remote);
    ASSERT_OK(rdir.status());
    dir_remote_ = new std::string(*rdir);
  }
  static void TearDownTestSuite() {
    delete hub_;
    delete files_;
    delete dir_a_;
    delete dir_b_;
    delete dir_remote_;
  }

  void SetUp() override {
    ASSERT_NE(hub_, nullptr);
    ASSERT_OK(SetState({}));
  }

  // The base state, with `tamper` on org/tiny, and the moving branch `moving` -> A then B.
  static absl::Status SetState(const nlohmann::json& tamper) {
    nlohmann::json commits = {{kCommitA, *dir_a_}, {kCommitB, *dir_b_}};
    return hub_->SetState(
        {{"tokens", {{"hf_good", {"org/gated"}}}},
         {"lfs_threshold", kLfsThreshold},
         {"repos",
          {{"org/tiny",
            {{"commits", commits},
             {"refs", {{"main", {kCommitA}}, {"moving", {kCommitA, kCommitB}}}},
             {"tamper", tamper.is_null() ? nlohmann::json::object() : tamper}}},
           {"org/gated", {{"gated", "manual"}, {"commits", {{kCommitA, *dir_a_}}}}},
           {"org/remote", {{"commits", {{kCommitA, *dir_remote_}}}}}}}});
  }

  static absl::StatusOr<ProcessResult> Fetch(std::vector<std::string> args,
                                             std::map<std::string, std::string> env = {}) {
    args.insert(args.begin(), "fetch");
    env["HF_ENDPOINT"] = hub_->endpoint();
    if (!env.count("HF_TOKEN")) env["HF_TOKEN"] = "";
    return RunModelfs(args, env);
  }

  TempDir tmp_;
  static FakeHub* hub_;
  static std::map<std::string, std::string>* files_;
  static std::string* dir_a_;
  static std::string* dir_b_;
  static std::string* dir_remote_;
};

FakeHub* FetchE2eTest::hub_ = nullptr;
std::map<std::string, std::string>* FetchE2eTest::files_ = nullptr;
std::string* FetchE2eTest::dir_a_ = nullptr;
std::string* FetchE2eTest::dir_b_ = nullptr;
std::string* FetchE2eTest::dir_remote_ = nullptr;

TEST_F(FetchE2eTest, PinnedFetchWritesEveryDefaultFileAndALockFieldByField) {
  const fs::path dest = tmp_.path() / "model";
  ASSERT_OK_AND_ASSIGN(ProcessResult r,
                       Fetch({"org/tiny", "--revision", kCommitA, "--dest", dest.string()}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(Listing(dest), ElementsAre("README.md", "config.json", "generation_config.json",
                                         "model.safetensors", "modelfs.lock.json", "tiny.gguf",
                                         "tokenizer.json", "tokenizer_config.json"));
  nlohmann::json lock = nlohmann::json::parse(Read(dest / "modelfs.lock.json"));
  EXPECT_EQ(lock["version"], 1);
  EXPECT_EQ(lock["endpoint"], hub_->endpoint());
  EXPECT_EQ(lock["repo"], "org/tiny");
  EXPECT_EQ(lock["revision"], kCommitA);
  EXPECT_EQ(lock["commit"], kCommitA);
  ASSERT_TRUE(lock["files"].is_array());
  std::vector<std::string> paths;
  for (const auto& f : lock["files"]) {
    const std::string path = f["path"];
    paths.push_back(path);
    const std::string& bytes = files_->at(path);
    EXPECT_EQ(f["size"], bytes.size()) << path;
    EXPECT_EQ(f["sha256"], Digest::Of(bytes).hex()) << path;
    EXPECT_EQ(Read(dest / path), bytes) << path;
    const bool lfs = bytes.size() >= kLfsThreshold;
    EXPECT_EQ(f["lfs"], lfs) << path;
    if (lfs) {
      EXPECT_FALSE(f.contains("gitBlobSha1")) << path;
    } else {
      EXPECT_EQ(f["gitBlobSha1"], GitBlobSha1Hex(bytes)) << path;
    }
  }
  EXPECT_THAT(paths,
              ElementsAre("README.md", "config.json", "generation_config.json", "model.safetensors",
                          "tiny.gguf", "tokenizer.json", "tokenizer_config.json"));
  EXPECT_THAT(r.out, HasSubstr("skipped  pytorch_model.bin (pickle checkpoint"));
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("fetched org/tiny@", kCommitA, " (7 files")));
}

TEST_F(FetchE2eTest, JsonOutputNamesTheCommitAndHowEachFileWasVerified) {
  const fs::path dest = tmp_.path() / "model";
  ASSERT_OK_AND_ASSIGN(ProcessResult r,
                       Fetch({"org/tiny", "model.safetensors", "config.json", "--revision",
                              kCommitA, "--dest", dest.string(), "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJsonOutput(r.out);
  EXPECT_EQ(j["commit"], kCommitA);
  EXPECT_EQ(j["resolved"], false);
  ASSERT_EQ(j["files"].size(), 2u);
  EXPECT_EQ(j["files"][0]["path"], "config.json");
  EXPECT_EQ(j["files"][0]["verified_by"], "git blob sha1 (blobId, ETag)");
  EXPECT_EQ(j["files"][1]["path"], "model.safetensors");
  EXPECT_EQ(j["files"][1]["verified_by"], "sha256 (lfs.sha256, X-Linked-Etag)");
  EXPECT_EQ(j["bytes"], files_->at("config.json").size() + files_->at("model.safetensors").size());
}

TEST_F(FetchE2eTest, TheTokenNeverReachesTheCdn) {
  ASSERT_OK_AND_ASSIGN(ProcessResult r, Fetch({"org/gated", "--revision", kCommitA, "--dest",
                                               (tmp_.path() / "g").string()},
                                              {{"HF_TOKEN", "hf_good"}}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int cdn = 0;
  for (const FakeHubRequest& q : hub_->ReadLog()) {
    if (q.server != "cdn") continue;
    ++cdn;
    EXPECT_FALSE(q.auth) << q.path;
  }
  EXPECT_GT(cdn, 0);
}

TEST_F(FetchE2eTest, ABranchNameIsRefusedWithExitTwoAndTheCommitToPin) {
  const fs::path dest = tmp_.path() / "model";
  ASSERT_OK_AND_ASSIGN(ProcessResult r,
                       Fetch({"org/tiny", "--revision", "main", "--dest", dest.string()}));
  EXPECT_EQ(r.exit_code, 2);
  ExpectOneErrorLine(r);
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat("--revision ", kCommitA)));
  EXPECT_THAT(r.err, HasSubstr("--resolve"));
  EXPECT_FALSE(fs::exists(dest));
}

TEST_F(FetchE2eTest, ResolveAcceptsTheBranchAndPrintsTheCommit) {
  const fs::path dest = tmp_.path() / "model";
  ASSERT_OK_AND_ASSIGN(ProcessResult r, Fetch({"org/tiny", "--revision", "main", "--resolve",
                                               "--dest", dest.string()}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith(absl::StrCat("resolved main to commit ", kCommitA, "\n")));
  nlohmann::json lock = nlohmann::json::parse(Read(dest / "modelfs.lock.json"));
  EXPECT_EQ(lock["revision"], "main");
  EXPECT_EQ(lock["commit"], kCommitA);
}

TEST_F(FetchE2eTest, ABranchThatMovesBetweenCallsIsFetchedAtTheCommitItFirstResolvedTo) {
  // "moving" answers A to the first revision call and B afterwards: the files must all be A's.
  const fs::path dest = tmp_.path() / "model";
  ASSERT_OK_AND_ASSIGN(ProcessResult r, Fetch({"org/tiny", "--revision", "moving", "--resolve",
                                               "--dest", dest.string(), "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ParseJsonOutput(r.out)["commit"], kCommitA);
  EXPECT_EQ(Read(dest / "model.safetensors"), files_->at("model.safetensors"));
  for (const FakeHubRequest& q : hub_->ReadLog()) {
    if (q.path.find("/org/tiny/resolve/") == 0 && absl::StrContains(q.path, "model.safetensors")) {
      EXPECT_THAT(q.path, Not(HasSubstr("/moving/")));  // fetched by commit, never by branch
    }
  }
  const fs::path again = tmp_.path() / "again";
  ASSERT_OK_AND_ASSIGN(ProcessResult r2, Fetch({"org/tiny", "--revision", "moving", "--resolve",
                                                "--dest", again.string(), "--json"}));
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  EXPECT_EQ(ParseJsonOutput(r2.out)["commit"], kCommitB);
  EXPECT_EQ(Read(again / "model.safetensors"), TinySafetensors(2));
}

TEST_F(FetchE2eTest, ATamperedLfsFileExitsOneAndLeavesNothingInDest) {
  ASSERT_OK(SetState({{"model.safetensors", 200}}));
  const fs::path dest = tmp_.path() / "model";
  ASSERT_OK_AND_ASSIGN(ProcessResult r,
                       Fetch({"org/tiny", "--revision", kCommitA, "--dest", dest.string()}));
  EXPECT_EQ(r.exit_code, 1);
  ExpectOneErrorLine(r);
  EXPECT_THAT(r.err, HasSubstr("model.safetensors: failed verification"));
  EXPECT_FALSE(fs::exists(dest));
  EXPECT_THAT(Listing(tmp_.path()), IsEmpty());  // no staging directory left either

  // An existing DEST is left exactly as it was.
  fs::create_directories(dest);
  tmp_.WriteFile("model/keep.txt", "mine");
  ASSERT_OK_AND_ASSIGN(ProcessResult r2,
                       Fetch({"org/tiny", "--revision", kCommitA, "--dest", dest.string()}));
  EXPECT_EQ(r2.exit_code, 1);
  EXPECT_THAT(Listing(dest), ElementsAre("keep.txt"));
}

TEST_F(FetchE2eTest, AGatedRepositoryWithoutATokenExitsOneNamingHfToken) {
  const fs::path dest = tmp_.path() / "model";
  ASSERT_OK_AND_ASSIGN(ProcessResult r,
                       Fetch({"org/gated", "--revision", kCommitA, "--dest", dest.string()}));
  EXPECT_EQ(r.exit_code, 1);
  ExpectOneErrorLine(r);
  EXPECT_THAT(r.err, HasSubstr("HF_TOKEN"));
  EXPECT_THAT(r.err, HasSubstr("GatedRepo"));
  EXPECT_FALSE(fs::exists(dest));
  ASSERT_OK_AND_ASSIGN(ProcessResult ok,
                       Fetch({"org/gated", "--revision", kCommitA, "--dest", dest.string()},
                             {{"HF_TOKEN", "hf_good"}}));
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

TEST_F(FetchE2eTest, ARepositoryWithAutoMapIsRefusedUnlessRemoteCodeIsAllowed) {
  const fs::path dest = tmp_.path() / "model";
  ASSERT_OK_AND_ASSIGN(ProcessResult r,
                       Fetch({"org/remote", "--revision", kCommitA, "--dest", dest.string()}));
  EXPECT_EQ(r.exit_code, 1);
  ExpectOneErrorLine(r);
  EXPECT_THAT(r.err, HasSubstr("auto_map"));
  EXPECT_THAT(r.err, HasSubstr("--allow-remote-code"));
  EXPECT_FALSE(fs::exists(dest));
  for (const FakeHubRequest& q : hub_->ReadLog()) {
    EXPECT_FALSE(absl::StrContains(q.path, "/org/remote/resolve/") &&
                 absl::StrContains(q.path, "model.safetensors"))
        << "weights fetched before the refusal: " << q.path;
  }
  ASSERT_OK_AND_ASSIGN(ProcessResult ok, Fetch({"org/remote", "--revision", kCommitA,
                                                "--allow-remote-code", "--dest", dest.string()}));
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_TRUE(fs::exists(dest / "modeling_x.py"));
}

TEST_F(FetchE2eTest, AMissingFileRevisionOrRepositoryExitsTwo) {
  const std::string dest = (tmp_.path() / "model").string();
  ASSERT_OK_AND_ASSIGN(ProcessResult file,
                       Fetch({"org/tiny", "nope.json", "--revision", kCommitA, "--dest", dest}));
  EXPECT_EQ(file.exit_code, 2);
  ExpectOneErrorLine(file);
  EXPECT_THAT(file.err, HasSubstr("nope.json"));
  ASSERT_OK_AND_ASSIGN(ProcessResult rev,
                       Fetch({"org/tiny", "--revision", std::string(40, 'f'), "--dest", dest}));
  EXPECT_EQ(rev.exit_code, 2);
  EXPECT_THAT(rev.err, HasSubstr("RevisionNotFound"));
  ASSERT_OK_AND_ASSIGN(ProcessResult branch, Fetch({"org/tiny", "--revision", "no-such-branch",
                                                    "--resolve", "--dest", dest}));
  EXPECT_EQ(branch.exit_code, 2);
  ASSERT_OK_AND_ASSIGN(ProcessResult usage, Fetch({"org/tiny", "--dest", dest}));
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_THAT(usage.err, HasSubstr("--revision"));
  EXPECT_FALSE(fs::exists(dest));
}

TEST_F(FetchE2eTest, FetchLockRefetchesExactlyAndVerifyChecksOffline) {
  const fs::path first = tmp_.path() / "first";
  ASSERT_OK_AND_ASSIGN(ProcessResult r,
                       Fetch({"org/tiny", "--revision", kCommitA, "--dest", first.string()}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path second = tmp_.path() / "second";
  ASSERT_OK_AND_ASSIGN(ProcessResult again, Fetch({"--lock", (first / "modelfs.lock.json").string(),
                                                   "--dest", second.string()}));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(DescribeFiles(second.string()), DescribeFiles(first.string()));

  ASSERT_OK_AND_ASSIGN(ProcessResult ok, RunModelfs({"verify", second.string()}));
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_THAT(ok.out, HasSubstr("7 of 7 files match the lock"));

  // One flipped byte: verify names the file and exits 1.
  std::string bytes = Read(second / "model.safetensors");
  bytes[bytes.size() - 1] ^= 1;
  std::ofstream(second / "model.safetensors", std::ios::binary | std::ios::trunc) << bytes;
  ASSERT_OK_AND_ASSIGN(ProcessResult bad, RunModelfs({"verify", second.string(), "--json"}));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.err, HasSubstr("model.safetensors sha256 differs"));
  nlohmann::json j = ParseJsonOutput(bad.out);
  EXPECT_EQ(j["ok"], false);
  for (const auto& f : j["files"]) {
    EXPECT_EQ(f["state"], f["path"] == "model.safetensors" ? "sha256 differs" : "ok");
  }
}

TEST_F(FetchE2eTest, FetchLockRefusesWhatTheCdnNowServesDifferently) {
  const fs::path first = tmp_.path() / "first";
  ASSERT_OK_AND_ASSIGN(ProcessResult r,
                       Fetch({"org/tiny", "--revision", kCommitA, "--dest", first.string()}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_OK(SetState({{"tiny.gguf", 10}}));
  const fs::path second = tmp_.path() / "second";
  ASSERT_OK_AND_ASSIGN(ProcessResult again, Fetch({"--lock", (first / "modelfs.lock.json").string(),
                                                   "--dest", second.string()}));
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_THAT(again.err, HasSubstr("tiny.gguf: failed verification"));
  EXPECT_FALSE(fs::exists(second));
}

TEST_F(FetchE2eTest, VerifyWithoutALockExitsTwo) {
  ASSERT_OK_AND_ASSIGN(ProcessResult r, RunModelfs({"verify", tmp_.path().string()}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("has no modelfs.lock.json"));
}

}  // namespace
}  // namespace modelfs::testing
