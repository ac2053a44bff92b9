// llama.cpp, the loader behind Ollama, LM Studio and llama-server, loads models through
// `modelfs mount` of V and evaluates exactly as from local disk: small llama GGUFs in F16, Q8_0
// and Q4_K (modelfs-synth's llama-gguf writer), pushed to a real docker-registry, mounted
// cold (every byte fetched and chunk-verified on demand) and warm (the layers sealed in the
// cache and read by passthrough), loaded with mmap (llama.cpp's default) and with
// use_mmap=false. integration/llama/eval.mjs runs llama.cpp (node-llama-cpp's prebuilt CPU
// binaries, never built or fetched at run time) and prints greedy tokens and the top
// probabilities of each step; they must equal the local file's, bit for bit.
//
// Needs /dev/fuse, Node.js >= 20 and `npm ci` in integration/llama (scripts/install-deps.sh):
// skipped without them, failed under CI=true.
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/formats/synthetic_models.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration/harness/registry_fixture.h"
#include "integration/mount/mount_test_env.h"
#include "nlohmann/json.hpp"
#include "tests/testing/skip.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;

// The model directory pushed as M and V: one GGUF per weight type.
const std::vector<std::pair<std::string, uint32_t>> kModels = {
    {"llama-f16.gguf", 1}, {"llama-q8_0.gguf", 8}, {"llama-q4_k.gguf", 12}};

struct SuiteEnv {
  std::unique_ptr<TempDir> work;
  std::unique_ptr<RegistryFixture> registry;
  std::string model_dir;
  std::string volume_ref;
  // file -> eval.mjs output for the local file, with mmap and without.
  std::map<std::string, nlohmann::json> local_mmap, local_read;
};
SuiteEnv* env = nullptr;
std::string suite_unavailable;
std::string suite_error;

std::string SourceDir() {
  const char* s = getenv("MODELFS_SOURCE_DIR");
  return s != nullptr ? s : "";
}
std::string EvalScript() { return SourceDir() + "/integration/llama/eval.mjs"; }

// Empty when Node.js >= 20 and the installed node-llama-cpp with its linux-x64 binaries are
// here; else what is missing.
std::string LlamaUnavailable() {
  if (SourceDir().empty()) return "MODELFS_SOURCE_DIR is not set";
  auto r = RunCommand({"node", "--version"}, absl::Seconds(30));
  if (!r.ok() || r->exit_code != 0) return "no `node` on PATH (Node.js >= 20)";
  int major = 0;
  std::string v(absl::StripPrefix(absl::StripAsciiWhitespace(r->out), "v"));
  if (!absl::SimpleAtoi(v.substr(0, v.find('.')), &major) || major < 20) {
    return absl::StrCat("node ", r->out, " is older than 20, which node-llama-cpp 3.21.1 needs");
  }
  const std::string modules = SourceDir() + "/integration/llama/node_modules";
  for (const char* pkg : {"node-llama-cpp/package.json", "@node-llama-cpp/linux-x64/package.json"}) {
    if (!fs::exists(fs::path(modules) / pkg)) {
      return absl::StrCat(modules, "/", pkg,
                          " is missing: run scripts/install-deps.sh (npm ci in integration/llama)");
    }
  }
  return "";
}

// eval.mjs's JSON for `path`. Errors name the file and carry the script's stderr.
absl::StatusOr<nlohmann::json> Eval(const std::string& path, bool use_mmap) {
  std::vector<std::string> argv = {"node", EvalScript(), path, "--threads", "2"};
  if (!use_mmap) argv.push_back("--no-mmap");
  auto r = RunCommand(argv, absl::Seconds(180));
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return absl::InternalError(
        absl::StrCat("llama.cpp on ", path, " exited ", r->exit_code, ": ", r->err));
  }
  nlohmann::json j = nlohmann::json::parse(r->out, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InternalError(absl::StrCat("llama.cpp on ", path, " printed no JSON: ", r->out));
  }
  return j;
}

class LlamaMountE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    BecomeSubreaper();
    if (access("/dev/fuse", R_OK | W_OK) != 0) {
      suite_unavailable = "no usable /dev/fuse";
      return;
    }
    suite_unavailable = LlamaUnavailable();
    if (!suite_unavailable.empty()) return;
    setenv("DOCKER_CONFIG", "/nonexistent/modelfs-llama-e2e", 1);
    env = new SuiteEnv();
    env->work = std::make_unique<TempDir>();
    env->model_dir = env->work->Join("model").string();
    fs::create_directories(env->model_dir);
    for (const auto& [file, type] : kModels) {
      LlamaCppSpec spec;
      spec.weight_type = type;
      absl::Status s = WriteLlamaCppGguf(env->model_dir + "/" + file, spec);
      if (!s.ok()) {
        suite_error = absl::StrCat("writing ", file, ": ", s.message());
        return;
      }
    }
    auto reg = RegistryFixture::Start(RegistryFixtureOptions{});
    if (!reg.ok()) {
      suite_error = absl::StrCat("the registry did not start: ", reg.status().message());
      return;
    }
    env->registry = std::move(*reg);
    const std::string ref = absl::StrCat(env->registry->host_port(), "/models/llama:v1");
    env->volume_ref = ref + "-volume";
    auto push = RunCommand({ModelfsBinary(), "push", "--plain-http", ref, env->model_dir},
                           absl::Seconds(180));
    if (!push.ok() || push->exit_code != 0) {
      suite_error = absl::StrCat("modelfs push ", ref, " failed: ",
                                 push.ok() ? push->err : std::string(push.status().message()));
      return;
    }
    for (const auto& [file, type] : kModels) {
      for (bool use_mmap : {true, false}) {
        auto j = Eval(env->model_dir + "/" + file, use_mmap);
        if (!j.ok()) {
          suite_error = absl::StrCat("the local load: ", j.status().message());
          return;
        }
        (use_mmap ? env->local_mmap : env->local_read)[file] = *j;
      }
    }
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
    cache_ = tmp_->Join("cache").string();
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

  ModelMount* Mount() {
    MountOptions o;
    o.cache_dir = cache_;
    o.log_file = tmp_->Join("mount.log").string();
    auto m = ModelMount::Start(env->volume_ref, mnt_, o);
    EXPECT_OK(m.status());
    if (!m.ok()) return nullptr;
    mounts_.push_back(std::move(*m));
    return mounts_.back().get();
  }

  // Loads every model through the mount and expects the local file's tokens and probabilities.
  void ExpectEveryModelEvaluatesAsFromLocalDisk(bool use_mmap) {
    for (const auto& [file, type] : kModels) {
      ASSERT_OK_AND_ASSIGN(nlohmann::json got, Eval(mnt_ + "/" + file, use_mmap));
      const nlohmann::json& want = (use_mmap ? env->local_mmap : env->local_read).at(file);
      ASSERT_EQ(got["tokens"].size(), 4u) << file;
      EXPECT_EQ(got["tokens"], want["tokens"]) << file;
      EXPECT_EQ(got["steps"], want["steps"]) << file << "\nmounted: " << got["steps"].dump()
                                             << "\nlocal:   " << want["steps"].dump();
    }
  }

  // Reads every file once through a first mount, so a second mount of the same cache finds
  // every layer sealed.
  void WarmTheCache() {
    ModelMount* first = Mount();
    ASSERT_NE(first, nullptr);
    for (const auto& [file, type] : kModels) {
      ASSERT_OK(ReadWholeFile(mnt_ + "/" + file).status()) << file;
    }
    ASSERT_OK(first->Unmount());
  }

  std::unique_ptr<TempDir> tmp_;
  std::string mnt_;
  std::string cache_;
  std::vector<std::unique_ptr<ModelMount>> mounts_;
};

TEST_F(LlamaMountE2eTest, ColdMountWithMmapEvaluatesAsFromLocalDisk) {
  ModelMount* m = Mount();
  ASSERT_NE(m, nullptr);
  ExpectEveryModelEvaluatesAsFromLocalDisk(/*use_mmap=*/true);
  // Cold: the weights came from the registry, through chunk verification.
  ASSERT_OK_AND_ASSIGN(nlohmann::json stats, m->FreshStats());
  EXPECT_GT(stats["bytes_fetched"].get<uint64_t>(), 0u) << stats.dump();
}

TEST_F(LlamaMountE2eTest, ColdMountWithoutMmapEvaluatesAsFromLocalDisk) {
  ModelMount* m = Mount();
  ASSERT_NE(m, nullptr);
  ExpectEveryModelEvaluatesAsFromLocalDisk(/*use_mmap=*/false);
  ASSERT_OK_AND_ASSIGN(nlohmann::json stats, m->FreshStats());
  EXPECT_GT(stats["bytes_fetched"].get<uint64_t>(), 0u) << stats.dump();
}

TEST_F(LlamaMountE2eTest, WarmMountWithMmapEvaluatesAsFromLocalDiskWithoutRegistryBytes) {
  WarmTheCache();
  ModelMount* m = Mount();
  ASSERT_NE(m, nullptr);
  ExpectEveryModelEvaluatesAsFromLocalDisk(/*use_mmap=*/true);
  ASSERT_OK_AND_ASSIGN(nlohmann::json stats, m->FreshStats());
  EXPECT_EQ(stats["bytes_fetched"], 0) << stats.dump();
}

TEST_F(LlamaMountE2eTest, WarmMountWithoutMmapEvaluatesAsFromLocalDiskWithoutRegistryBytes) {
  WarmTheCache();
  ModelMount* m = Mount();
  ASSERT_NE(m, nullptr);
  ExpectEveryModelEvaluatesAsFromLocalDisk(/*use_mmap=*/false);
  ASSERT_OK_AND_ASSIGN(nlohmann::json stats, m->FreshStats());
  EXPECT_EQ(stats["bytes_fetched"], 0) << stats.dump();
}

}  // namespace
}  // namespace modelfs::testing
