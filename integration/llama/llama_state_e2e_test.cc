// Model state as an artifact, with a real runtime: llama.cpp (node-llama-cpp) primes a sequence
// of a synthetic llama GGUF with a fixed prompt and saves its state; `modelfs state push`
// publishes that file as a state of the model M in a real docker-registry; `modelfs mount M
// --state S` mounts model and state on a fresh cache; llama.cpp loads the state from the mount
// and continues greedy decoding. Loading a state must change nothing but speed: the tokens and
// probabilities equal those of a sequence primed from scratch, bit for bit. The test prints
// what priming cost each way (prompt evaluation against state load, cold and warm).
//
// Needs /dev/fuse, Node.js >= 20 and node-llama-cpp (scripts/install-deps.sh): skipped without
// them, failed under CI=true.
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration/llama/llama_test_env.h"
#include "integration/mount/mount_test_env.h"
#include "nlohmann/json.hpp"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/synth/synthetic_models.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Long enough that evaluating it costs far more than reading its state (the model's context
// is 512 tokens).
constexpr int kPromptTokens = 480;
constexpr char kModelFile[] = "model.gguf";
constexpr char kStateFile[] = "prompt.state";

std::string SourceDir() {
  const char* s = getenv("MODELFS_SOURCE_DIR");
  return s != nullptr ? s : "";
}

// state.mjs's JSON line. Errors carry its stderr.
absl::StatusOr<nlohmann::json> RunStateScript(std::vector<std::string> args) {
  std::vector<std::string> argv = {"node", SourceDir() + "/testsupport/llama/state.mjs"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"--prompt-tokens", std::to_string(kPromptTokens), "--threads", "2"});
  auto r = RunCommand(argv, absl::Seconds(300));
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return absl::InternalError(absl::StrCat("state.mjs exited ", r->exit_code, ": ", r->err));
  }
  nlohmann::json j = nlohmann::json::parse(r->out, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InternalError("state.mjs printed no JSON: " + r->out);
  return j;
}

absl::StatusOr<nlohmann::json> Modelfs(std::vector<std::string> args) {
  args.insert(args.begin(), ModelfsBinary());
  auto r = RunCommand(args, absl::Seconds(300));
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return absl::InternalError(absl::StrCat(args[1], " exited ", r->exit_code, ": ", r->err));
  }
  nlohmann::json j = nlohmann::json::parse(r->out, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InternalError(args[1] + " printed no JSON: " + r->out);
  return j;
}

struct StateSuite {
  std::unique_ptr<TempDir> work;
  std::unique_ptr<RegistryFixture> registry;
  std::string model_dir;
  std::string model_ref, model_digest;  // M, pinned
  std::string other_ref;                // another model, pinned
  std::string state_path;               // the file llama.cpp saved
  nlohmann::json state_push;            // `state push --json`
  nlohmann::json scratch;               // continue after priming from scratch, local file
};

absl::StatusOr<std::unique_ptr<StateSuite>> StartStateSuite() {
  auto s = std::make_unique<StateSuite>();
  s->work = std::make_unique<TempDir>();
  s->model_dir = s->work->Join("model").string();
  const std::string other_dir = s->work->Join("other").string();
  fs::create_directories(s->model_dir);
  fs::create_directories(other_dir);
  LlamaCppSpec spec;
  spec.layers = 8;
  spec.embedding = 512;
  spec.ffn = 1536;
  if (absl::Status st = WriteLlamaCppGguf(s->model_dir + "/" + kModelFile, spec); !st.ok()) {
    return st;
  }
  spec.seed = 99;
  if (absl::Status st = WriteLlamaCppGguf(other_dir + "/" + kModelFile, spec); !st.ok()) {
    return st;
  }
  auto reg = RegistryFixture::Start(RegistryFixtureOptions{});
  if (!reg.ok()) return reg.status();
  s->registry = std::move(*reg);
  const std::string repo = absl::StrCat(s->registry->host_port(), "/models/state-llama");
  auto pushed = Modelfs({"push", "--plain-http", "--json", repo + ":v1", s->model_dir});
  if (!pushed.ok()) return pushed.status();
  s->model_digest = (*pushed)["model"]["digest"];
  s->model_ref = absl::StrCat(repo, "@", s->model_digest);
  auto other = Modelfs({"push", "--plain-http", "--json", repo + ":other", other_dir});
  if (!other.ok()) return other.status();
  s->other_ref = absl::StrCat(repo, "@", (*other)["model"]["digest"].get<std::string>());

  const std::string state_dir = s->work->Join("state").string();
  fs::create_directories(state_dir);
  s->state_path = state_dir + "/" + kStateFile;
  auto primed = RunStateScript({"prime", s->model_dir + "/" + kModelFile, "--out", s->state_path});
  if (!primed.ok()) return primed.status();
  // Pushed by the volume image's tag: state push follows V to M.
  auto state = Modelfs({"state", "push", "--plain-http", "--json", repo + ":v1-volume",
                        s->state_path, "--name", "primed", "--format", "llama.cpp", "--tokens",
                        std::to_string(kPromptTokens - 1), "--precision", "f16"});
  if (!state.ok()) return state.status();
  s->state_push = *state;
  auto scratch = RunStateScript({"continue", s->model_dir + "/" + kModelFile});
  if (!scratch.ok()) return scratch.status();
  s->scratch = *scratch;
  return s;
}

StateSuite* env = nullptr;
std::string suite_unavailable;
std::string suite_error;

class LlamaStateE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    BecomeSubreaper();
    if (access("/dev/fuse", R_OK | W_OK) != 0) {
      suite_unavailable = "no usable /dev/fuse";
      return;
    }
    suite_unavailable = LlamaUnavailable();
    if (!suite_unavailable.empty()) return;
    setenv("DOCKER_CONFIG", "/nonexistent/modelfs-llama-state-e2e", 1);
    auto suite = StartStateSuite();
    if (!suite.ok()) {
      suite_error = std::string(suite.status().message());
      return;
    }
    env = suite->release();
  }
  static void TearDownTestSuite() {
    delete env;
    env = nullptr;
  }

  void SetUp() override {
    SKIP_OR_FAIL_IF_UNAVAILABLE(suite_unavailable);
    ASSERT_EQ(suite_error, "") << "suite setup failed";
    tmp_ = std::make_unique<TempDir>();
    mnt_ = tmp_->Join("mnt").string();
    fs::create_directories(mnt_);
  }
  void TearDown() override {
    for (auto& m : mounts_) EXPECT_OK(m->Unmount());
    if (HasFailure() && tmp_) {
      std::ifstream in(tmp_->Join("mount.log").string());
      std::stringstream ss;
      ss << in.rdbuf();
      if (!ss.str().empty()) std::cerr << "mount daemon log:\n" << ss.str();
    }
    mounts_.clear();
    tmp_.reset();
  }

  MountOptions Options() {
    MountOptions o;
    o.cache_dir = tmp_->Join("cache").string();  // fresh for every test
    o.log_file = tmp_->Join("mount.log").string();
    return o;
  }
  ModelMount* Mount(const std::string& ref, const MountOptions& o) {
    auto m = ModelMount::Start(ref, mnt_, o);
    EXPECT_OK(m.status());
    if (!m.ok()) return nullptr;
    mounts_.push_back(std::move(*m));
    return mounts_.back().get();
  }
  std::string StateRef() const { return env->state_push["state"]["reference"]; }

  std::unique_ptr<TempDir> tmp_;
  std::string mnt_;
  std::vector<std::unique_ptr<ModelMount>> mounts_;
};

TEST_F(LlamaStateE2eTest, StatePushWritesAStateOfTheModelAndItsVolumeImage) {
  const nlohmann::json& p = env->state_push;
  EXPECT_EQ(p["model"]["digest"], env->model_digest);
  EXPECT_EQ(p["name"], "primed");
  EXPECT_EQ(p["format"], "llama.cpp");
  EXPECT_EQ(p["tokens"], kPromptTokens - 1);
  EXPECT_EQ(p["precision"], "f16");
  EXPECT_EQ(p["state"]["tag"], "state-primed");
  EXPECT_EQ(p["volume"]["tag"], "state-primed-volume");
  // Distribution 2.8 has no referrers API: the fallback tag lists the state.
  EXPECT_EQ(p["referrers"], "tag");
}

TEST_F(LlamaStateE2eTest, StateListShowsTheVerifiedStateOfTheModelOnly) {
  ASSERT_OK_AND_ASSIGN(nlohmann::json list,
                       Modelfs({"state", "list", "--plain-http", "--json", env->model_ref}));
  EXPECT_EQ(list["model"]["digest"], env->model_digest);
  ASSERT_EQ(list["states"].size(), 1u) << list.dump();
  const nlohmann::json& s = list["states"][0];
  EXPECT_EQ(s["reference"], StateRef());
  EXPECT_EQ(s["name"], "primed");
  EXPECT_EQ(s["tokens"], kPromptTokens - 1);
  EXPECT_EQ(s["volume"], env->state_push["volume"]["reference"]);
  ASSERT_EQ(s["files"].size(), 1u);
  EXPECT_EQ(s["files"][0]["path"], kStateFile);
  ASSERT_OK_AND_ASSIGN(std::string local, ReadWholeFile(env->state_path));
  EXPECT_EQ(s["files"][0]["digest"], Sha256Of(local));

  ASSERT_OK_AND_ASSIGN(nlohmann::json none,
                       Modelfs({"state", "list", "--plain-http", "--json", env->other_ref}));
  EXPECT_EQ(none["states"].size(), 0u) << none.dump();
}

TEST_F(LlamaStateE2eTest, LoadedStateContinuesExactlyAsAPrimingFromScratch) {
  MountOptions o = Options();
  o.extra_args = {"--state", StateRef()};
  ASSERT_NE(Mount(env->model_ref, o), nullptr);
  const std::string model = mnt_ + "/" + kModelFile;
  const std::string state = mnt_ + "/.state/" + kStateFile;
  // Cold: the state's bytes come from the registry, chunk-verified, as llama.cpp reads them.
  ASSERT_OK_AND_ASSIGN(nlohmann::json cold, RunStateScript({"continue", model, "--state", state}));
  // Warm: the same state again, now from the cache.
  ASSERT_OK_AND_ASSIGN(nlohmann::json warm, RunStateScript({"continue", model, "--state", state}));
  ASSERT_OK_AND_ASSIGN(nlohmann::json scratch, RunStateScript({"continue", model}));
  for (const nlohmann::json* got : {&cold, &warm, &scratch}) {
    ASSERT_EQ((*got)["tokens"].size(), 4u) << got->dump();
    EXPECT_EQ((*got)["tokens"], env->scratch["tokens"]);
    EXPECT_EQ((*got)["steps"], env->scratch["steps"])
        << "got: " << (*got)["steps"].dump() << "\nfrom scratch: " << env->scratch["steps"].dump();
  }
  EXPECT_EQ(cold["primed_by"], "state");
  EXPECT_EQ(scratch["primed_by"], "scratch");
  ASSERT_OK_AND_ASSIGN(std::string local, ReadWholeFile(env->state_path));
  std::cout << "priming " << kPromptTokens - 1 << " tokens (state " << local.size()
            << " bytes): prompt evaluation " << scratch["prime_ms"].dump()
            << " ms; state load from the mount cold " << cold["prime_ms"].dump() << " ms, warm "
            << warm["prime_ms"].dump() << " ms; local prompt evaluation "
            << env->scratch["prime_ms"].dump() << " ms\n";
}

TEST_F(LlamaStateE2eTest, MountedStateNamesItsModelInModelinfo) {
  MountOptions o = Options();
  o.extra_args = {"--state", StateRef()};
  ASSERT_NE(Mount(env->model_ref, o), nullptr);
  ASSERT_OK_AND_ASSIGN(std::string info_bytes, ReadWholeFile(mnt_ + "/.state/.modelinfo.json"));
  nlohmann::json info = nlohmann::json::parse(info_bytes);
  EXPECT_EQ(info["state"]["model"]["digest"], env->model_digest) << info_bytes;
  EXPECT_EQ(info["state"]["name"], "primed");
  EXPECT_EQ(info["state"]["format"], "llama.cpp");
  EXPECT_EQ(info["state"]["tokens"], kPromptTokens - 1);
  EXPECT_EQ(info["state"]["model"]["reference"], env->model_ref);
  ASSERT_OK_AND_ASSIGN(std::string model_info, ReadWholeFile(mnt_ + "/.modelinfo.json"));
  EXPECT_FALSE(nlohmann::json::parse(model_info).contains("state"));
}

TEST_F(LlamaStateE2eTest, StateVolumeImageMountsAloneVerifiedAndByteIdentical) {
  ASSERT_NE(Mount(env->state_push["volume"]["reference"], Options()), nullptr);
  ASSERT_OK_AND_ASSIGN(std::string got, ReadWholeFile(mnt_ + "/" + kStateFile));
  ASSERT_OK_AND_ASSIGN(std::string want, ReadWholeFile(env->state_path));
  EXPECT_TRUE(got == want) << "the mounted state differs from the file llama.cpp saved";
  ASSERT_OK_AND_ASSIGN(std::string info_bytes, ReadWholeFile(mnt_ + "/.modelinfo.json"));
  nlohmann::json info = nlohmann::json::parse(info_bytes);
  EXPECT_EQ(info["verification"], "chunk-index");
  EXPECT_EQ(info["state"]["model"]["digest"], env->model_digest);
}

TEST_F(LlamaStateE2eTest, StateManifestMountsAloneVerifiedWhole) {
  ASSERT_NE(Mount(StateRef(), Options()), nullptr);
  ASSERT_OK_AND_ASSIGN(std::string got, ReadWholeFile(mnt_ + "/" + kStateFile));
  ASSERT_OK_AND_ASSIGN(std::string want, ReadWholeFile(env->state_path));
  EXPECT_TRUE(got == want);
  ASSERT_OK_AND_ASSIGN(std::string info_bytes, ReadWholeFile(mnt_ + "/.modelinfo.json"));
  EXPECT_EQ(nlohmann::json::parse(info_bytes)["state"]["model"]["digest"], env->model_digest);
}

TEST_F(LlamaStateE2eTest, StateOfAnotherModelIsRefusedWithExitCode2) {
  ASSERT_OK_AND_ASSIGN(CommandResult r, RunCommand({ModelfsBinary(), "mount", "--plain-http",
                                                    "--cache", tmp_->Join("cache").string(),
                                                    env->other_ref, mnt_, "--state", StateRef()}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("is a state of model " + env->model_digest));
  EXPECT_FALSE(FindMount(fs::canonical(mnt_).string()).has_value());
}

TEST_F(LlamaStateE2eTest, AModelGivenAsStateIsRefusedWithExitCode2) {
  ASSERT_OK_AND_ASSIGN(
      CommandResult r,
      RunCommand({ModelfsBinary(), "mount", "--plain-http", "--cache", tmp_->Join("cache").string(),
                  env->model_ref, mnt_, "--state", env->other_ref}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("not a state"));
}

}  // namespace
}  // namespace modelfs::testing
