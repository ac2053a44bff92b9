// A model of 200 weight layers (shem splits a model into one layer per transformer block, and
// overlayfs stops at about 128 layers): pushed to a real docker-registry, converted, mounted with
// `modelfs mount` from one FUSE mount, and every file read back byte-identical. Prints the time
// until the mount is ready and the mount daemon's RSS, beside the same figures for the same
// weights in one layer, measured in the same run.
//
// Needs /dev/fuse: skipped without it, failed under CI=true.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/status/status_macros.h"
#include "gtest/gtest.h"
#include "integration/mount/mount_test_env.h"
#include "nlohmann/json.hpp"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/synth/synthetic_models.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kLayers = 200;

// One small llama GGUF per block, each its own weight layer: blocks/blk-000.gguf ... 199.
absl::Status WriteBlocks(const std::string& dir) {
  fs::create_directories(dir + "/blocks");
  for (int i = 0; i < kLayers; ++i) {
    TinyLlamaSpec spec;
    spec.layers = 1;
    spec.embedding = 64;
    spec.heads = 2;
    spec.kv_heads = 1;
    spec.ffn = 128;
    spec.vocab = 256;
    spec.context = 256;
    spec.seed = 1000 + i;
    RETURN_IF_ERROR(WriteTinyLlamaGguf(absl::StrFormat("%s/blocks/blk-%03d.gguf", dir, i), spec));
  }
  return absl::OkStatus();
}

// The same kind of weights in one file (the baseline): one GGUF with kLayers blocks.
absl::Status WriteOneLayer(const std::string& dir) {
  fs::create_directories(dir);
  TinyLlamaSpec spec;
  spec.layers = kLayers;
  spec.embedding = 64;
  spec.heads = 2;
  spec.kv_heads = 1;
  spec.ffn = 128;
  spec.vocab = 256;
  spec.context = 256;
  return WriteTinyLlamaGguf(dir + "/model.gguf", spec);
}

uint64_t RssKiB(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  }
  return 0;
}

class ManyLayersE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BecomeSubreaper();
    SKIP_OR_FAIL_IF_UNAVAILABLE(access("/dev/fuse", R_OK | W_OK) == 0 ? "" : "no usable /dev/fuse");
    setenv("DOCKER_CONFIG", "/nonexistent/modelfs-many-layers-e2e", 1);
    ASSERT_OK_AND_ASSIGN(registry_, RegistryFixture::Start(RegistryFixtureOptions{}));
  }

  std::string Ref(const std::string& tag) const {
    return absl::StrCat(registry_->host_port(), "/models/blocks:", tag);
  }

  // Pushes `dir` at `tag` and then converts M (by digest) again: the volume image must come out
  // the same. Returns `push --json`.
  nlohmann::json PushAndConvert(const std::string& dir, const std::string& tag) {
    auto push = RunModelfs({"push", "--plain-http", "--json", Ref(tag), dir});
    EXPECT_OK(push.status());
    if (!push.ok()) return nullptr;
    EXPECT_EQ(push->exit_code, 0) << push->err;
    nlohmann::json pushed = ParseJsonOutput(push->out);
    const std::string m = absl::StrCat(registry_->host_port(), "/models/blocks@",
                                       pushed["model"]["digest"].get<std::string>());
    auto convert =
        RunModelfs({"convert", "--plain-http", "--json", m, "--volume-tag", tag + "-converted"});
    EXPECT_OK(convert.status());
    if (!convert.ok()) return nullptr;
    EXPECT_EQ(convert->exit_code, 0) << convert->err;
    nlohmann::json converted = ParseJsonOutput(convert->out);
    EXPECT_EQ(converted["volume"]["digest"], pushed["volume"]["digest"]);
    pushed["converted"] = converted;
    return pushed;
  }

  struct Figures {
    absl::Duration ready;
    uint64_t rss_kib = 0;
  };

  // Mounts the converted volume image on a fresh cache, reads and checks every file against
  // `dir`, and returns the time `modelfs mount` took to report ready and the daemon's RSS
  // once every file was read.
  Figures MountAndCheckEveryFile(const std::string& dir, const nlohmann::json& pushed,
                                 const std::string& name) {
    Figures f;
    const std::string mnt = tmp_.Join("mnt-" + name).string();
    fs::create_directories(mnt);
    MountOptions o;
    o.cache_dir = tmp_.Join("cache-" + name).string();
    o.log_file = tmp_.Join("mount-" + name + ".log").string();
    const absl::Time t0 = absl::Now();
    auto m = ModelMount::Start(pushed["converted"]["volume"]["reference"], mnt, o);
    f.ready = absl::Now() - t0;
    EXPECT_OK(m.status());
    if (!m.ok()) return f;
    std::map<std::string, std::string> want = DescribeFiles(dir);
    std::map<std::string, std::string> got = DescribeFiles(mnt);
    EXPECT_EQ(got.erase(".modelinfo.json"), 1u);
    EXPECT_EQ(got, want);
    f.rss_kib = RssKiB((*m)->pid());
    absl::StatusOr<nlohmann::json> stats = (*m)->FreshStats();
    EXPECT_OK(stats.status());
    if (stats.ok()) {
      EXPECT_EQ((*stats)["verification_failures"], 0);
    }
    EXPECT_OK((*m)->Unmount());
    return f;
  }

  TempDir tmp_;
  std::unique_ptr<RegistryFixture> registry_;
};

TEST_F(ManyLayersE2eTest, TwoHundredWeightLayersMountByteIdenticalFromOneFuseMount) {
  const std::string blocks = tmp_.Join("blocks-model").string();
  const std::string single = tmp_.Join("single-model").string();
  ASSERT_OK(WriteBlocks(blocks));
  ASSERT_OK(WriteOneLayer(single));

  nlohmann::json many = PushAndConvert(blocks, "blocks");
  ASSERT_FALSE(HasFailure());
  int weight_layers = 0;
  for (const auto& b : many["blobs"]) {
    if (b["mediaType"] == "application/vnd.cncf.model.weight.v1.raw") ++weight_layers;
  }
  ASSERT_EQ(weight_layers, kLayers) << many.dump();
  nlohmann::json one = PushAndConvert(single, "single");
  ASSERT_FALSE(HasFailure());

  Figures f_many = MountAndCheckEveryFile(blocks, many, "blocks");
  Figures f_one = MountAndCheckEveryFile(single, one, "single");
  ASSERT_FALSE(HasFailure());
  uint64_t bytes_many = 0;
  for (const auto& e : fs::recursive_directory_iterator(blocks)) {
    if (e.is_regular_file()) bytes_many += e.file_size();
  }
  std::cout << "[figures] layers | weight bytes | mount ready | daemon RSS after reading all\n"
            << "[figures] " << kLayers << " | " << bytes_many << " | "
            << absl::ToInt64Milliseconds(f_many.ready) << " ms | " << f_many.rss_kib << " KiB\n"
            << "[figures] 1 | " << fs::file_size(single + "/model.gguf") << " | "
            << absl::ToInt64Milliseconds(f_one.ready) << " ms | " << f_one.rss_kib << " KiB\n";
}

}  // namespace
}  // namespace modelfs::testing
