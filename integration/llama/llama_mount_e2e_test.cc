// llama.cpp, the loader behind Ollama, LM Studio and llama-server, loads models through
// `modelfs mount` of V and evaluates exactly as from local disk: small llama GGUFs in F16, Q8_0
// and Q4_K (modelfs-synth's llama-gguf writer), pushed to a real docker-registry, mounted
// cold (every byte fetched and chunk-verified on demand) and warm (the layers sealed in the
// cache and read by passthrough), loaded with mmap (llama.cpp's default) and with
// use_mmap=false. testsupport/llama/eval.mjs runs llama.cpp (node-llama-cpp's prebuilt CPU
// binaries, never built or fetched at run time) and prints greedy tokens and the top
// probabilities of each step; they must equal the local file's, bit for bit.
//
// Needs /dev/fuse, Node.js >= 20 and `npm ci` in testsupport/llama (scripts/install-deps.sh):
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

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration/llama/llama_test_env.h"
#include "integration/mount/mount_test_env.h"
#include "nlohmann/json.hpp"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;

LlamaSuite* env = nullptr;
std::string suite_unavailable;
std::string suite_error;

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
    auto suite = StartLlamaSuite();
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

  void ExpectEveryModelEvaluatesAsFromLocalDisk(bool use_mmap) {
    ::modelfs::testing::ExpectEveryModelEvaluatesAsFromLocalDisk(*env, mnt_, use_mmap);
  }

  // Reads every file once through a first mount, so a second mount of the same cache finds
  // every layer sealed.
  void WarmTheCache() {
    ModelMount* first = Mount();
    ASSERT_NE(first, nullptr);
    for (const auto& [file, type] : LlamaModels()) {
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
