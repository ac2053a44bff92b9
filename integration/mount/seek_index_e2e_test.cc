// Compressed tar layers served lazily through a seek index, end to end: a ModelPack artifact
// whose one tar layer was compressed by the `gzip` and `zstd` tools (or written in frames as
// `push --compress zstd` does) is pushed to a real registry, `modelfs convert` writes its
// volume image (seek index + chunk index of the tar), and `modelfs mount` of it serves every
// byte right, says which layers are lazy in `stats`, and fetches at most 8 MiB of compressed
// bytes for a 4 MiB read. A single zstd frame is decoded whole, and stats says so.
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/oci/digest.h"
#include "core/oci/manifest.h"
#include "core/oci/modelpack.h"
#include "core/oci/tar.h"
#include "core/oci/volume_image.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration/mount/mount_test_env.h"
#include "nlohmann/json.hpp"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/compress.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

constexpr char kRepo[] = "models/seek";

class SeekIndexE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0 || !std::filesystem::exists("/dev/fuse")) {
      if (const char* ci = getenv("CI"); ci != nullptr && std::string(ci) == "true") {
        FAIL() << "needs root and /dev/fuse (CI=true: a missing component fails)";
      }
      GTEST_SKIP() << "needs root and /dev/fuse";
    }
    BecomeSubreaper();
    RegistryFixtureOptions ro;
    ro.access_log = true;  // which blobs a mount fetched, and how many bytes of each
    ASSERT_OK_AND_ASSIGN(registry_, RegistryFixture::Start(ro));
    const std::string src = tmp_.Join("src").string();
    ASSERT_OK_AND_ASSIGN(std::vector<std::string> files, WriteTestModel(src, /*seed=*/29));
    TarWriter tar;
    for (const std::string& f : files) {
      want_[f] = ReadFileOrDie(src + "/" + f);
      ASSERT_OK(tar.AddFile(f, want_[f]));
    }
    // Several gzip checkpoints (every 4 MiB) and zstd frames, at bf16's ratio.
    std::mt19937 rng(29);
    std::string weights(24 << 20, '\0');
    for (size_t i = 0; i < weights.size(); ++i) {
      weights[i] = static_cast<char>(i % 2 ? 0x3c + rng() % 3 : rng());
    }
    want_["big/weights.bin"] = weights;
    ASSERT_OK(tar.AddFile("big/weights.bin", weights));
    tar_ = tar.Finish();
    ASSERT_OK_AND_ASSIGN(client_, ConnectPlainHttp(registry_->host_port()));
  }

  // The tar compressed by a command-line tool ("gzip -6", "zstd -3").
  std::string Tool(const std::vector<std::string>& argv) {
    const std::string in = tmp_.WriteFile("layer.tar", tar_).string();
    std::vector<std::string> cmd = argv;
    cmd.push_back("-k");
    cmd.push_back("-f");
    cmd.push_back(in);
    absl::StatusOr<CommandResult> r = RunCommand(cmd);
    EXPECT_TRUE(r.ok() && r->exit_code == 0) << (r.ok() ? r->err : r.status().ToString());
    const std::string out = in + (argv[0] == "gzip" ? ".gz" : ".zst");
    std::string bytes = ReadFileOrDie(out);
    std::filesystem::remove(out);
    return bytes;
  }

  // Pushes M:`tag` with one compressed tar layer and converts it (V at `tag`-volume).
  void PushAndConvert(const std::string& tag, LayerEncoding encoding,
                      const std::string& compressed) {
    ASSERT_OK_AND_ASSIGN(Digest layer, UploadBlob(*client_, kRepo, compressed));
    ModelPackConfig config;
    config.config.format = "safetensors";
    config.modelfs.diff_ids = {Digest::Of(tar_)};
    const std::string config_blob = SerializeModelPackConfig(config);
    ASSERT_OK(UploadBlob(*client_, kRepo, config_blob).status());
    ModelLayerInput in;
    in.path = "model";
    in.digest = layer;
    in.size = compressed.size();
    in.kind = LayerKind::kWeight;
    in.encoding = encoding;
    ASSERT_OK_AND_ASSIGN(Manifest m, BuildModelManifest(config_blob, {in}));
    ASSERT_OK(
        client_->PutManifest(kRepo, tag, SerializeManifest(m), std::string(kOciManifestMediaType))
            .status());
    ASSERT_OK_AND_ASSIGN(ProcessResult c,
                         RunModelfs({"convert", "--plain-http", "--json",
                                     absl::StrCat(registry_->host_port(), "/", kRepo, ":", tag)}));
    ASSERT_EQ(c.exit_code, 0) << c.err;
    convert_json_ = ParseJsonOutput(c.out);
    layer_ = layer;
    ratio_ = static_cast<double>(compressed.size()) / static_cast<double>(tar_.size());
  }

  std::unique_ptr<ModelMount> Mount(const std::string& tag) {
    MountOptions o;
    o.cache_dir = tmp_.Join("cache-" + tag).string();
    const std::string dir = tmp_.Join("mnt-" + tag).string();
    std::filesystem::create_directories(dir);
    absl::StatusOr<std::unique_ptr<ModelMount>> m = ModelMount::Start(
        absl::StrCat(registry_->host_port(), "/", kRepo, ":", tag, "-volume"), dir, o);
    EXPECT_OK(m.status());
    return m.ok() ? std::move(*m) : nullptr;
  }

  // A 4 MiB read in the middle of the big file: the cache asks only for its chunks (a lazily
  // decoded layer reads ahead only for a run of two spans and over 8 MiB), and the compressed
  // bytes fetched are those of the chunks and of at most one span of lead-in before them (4
  // MiB gzip checkpoints): at most 8 MiB.
  void ExpectALazyFourMiBRead(ModelMount& m) {
    ASSERT_OK_AND_ASSIGN(nlohmann::json before, m.FreshStats());
    const int fd = open((m.dir() + "/big/weights.bin").c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    const uint64_t off = (11 << 20) + 12345;
    ASSERT_OK_AND_ASSIGN(std::string got, PreadExact(fd, off, 4 << 20));
    close(fd);
    EXPECT_TRUE(got == want_["big/weights.bin"].substr(off, 4 << 20));
    ASSERT_OK_AND_ASSIGN(nlohmann::json after, m.FreshStats());
    const uint64_t fetched = after["compressed_bytes_fetched"].get<uint64_t>() -
                             before["compressed_bytes_fetched"].get<uint64_t>();
    const uint64_t asked =
        after["bytes_fetched"].get<uint64_t>() - before["bytes_fetched"].get<uint64_t>();
    EXPECT_GT(fetched, 0u) << after.dump();
    const uint64_t lead_in =
        after["lead_in_bytes"].get<uint64_t>() - before["lead_in_bytes"].get<uint64_t>();
    // The read's 5 chunks, no readahead.
    EXPECT_LE(asked, 5u << 20) << after.dump();
    // Only the compressed bytes of what was decoded: the tar asked for and the lead-in from
    // the point before it (at most one span; lead_in_bytes counts it when a span is first
    // entered, which an earlier read may have done), at the layer's ratio, and a little slack.
    EXPECT_LE(lead_in, 4u << 20) << after.dump();
    EXPECT_LE(static_cast<double>(fetched),
              static_cast<double>(asked + (4u << 20)) * ratio_ * 1.05 + (256 << 10))
        << after.dump();
    EXPECT_LE(fetched, 8u << 20) << after.dump();
    printf(
        "4 MiB read at %lu: the cache asked %lu bytes of the tar, %lu compressed bytes "
        "fetched, lead-in %lu\n",
        static_cast<unsigned long>(off), static_cast<unsigned long>(asked),
        static_cast<unsigned long>(fetched),
        static_cast<unsigned long>(after["lead_in_bytes"].get<uint64_t>() -
                                   before["lead_in_bytes"].get<uint64_t>()));
    EXPECT_LT(after["bytes_fetched"].get<uint64_t>(), tar_.size()) << after.dump();
  }

  // Adds a file of bf16-like weights to the model's tar.
  void AddWeights(const std::string& path, size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::string weights(n, '\0');
    for (size_t i = 0; i < n; ++i) weights[i] = static_cast<char>(i % 2 ? 0x3c + rng() % 3 : rng());
    want_[path] = std::move(weights);
    TarWriter tar;
    for (const auto& [p, bytes] : want_) ASSERT_OK(tar.AddFile(p, bytes));
    tar_ = tar.Finish();
  }

  // The byte counts of the registry's answers to GETs of `blob` so far (its access log).
  std::vector<uint64_t> BlobGets(const Digest& blob) {
    std::vector<uint64_t> out;
    std::ifstream in(registry_->log_path());
    const std::string needle = absl::StrCat("\"GET /v2/", kRepo, "/blobs/", blob.str(), " ");
    std::string line;
    while (std::getline(in, line)) {
      const size_t at = line.find(needle);
      if (at == std::string::npos) continue;
      // ... HTTP/1.1" 206 24783 "referer" "agent"
      const size_t q = line.find('"', at + needle.size());
      unsigned status = 0;
      unsigned long long bytes = 0;
      if (q != std::string::npos &&
          sscanf(line.c_str() + q + 1, " %u %llu", &status, &bytes) == 2) {
        out.push_back(bytes);
      }
    }
    return out;
  }

  void ExpectEveryFile(const std::string& dir) {
    std::map<std::string, std::string> got = DescribeFiles(dir);
    got.erase(".modelinfo.json");
    std::map<std::string, std::string> want;
    for (const auto& [path, bytes] : want_) want[path] = Digest::Of(bytes).str();
    EXPECT_EQ(got, want);
  }

  TempDir tmp_;
  std::unique_ptr<RegistryFixture> registry_;
  std::unique_ptr<RegistryClient> client_;
  std::map<std::string, std::string> want_;
  std::string tar_;
  nlohmann::json convert_json_;
  Digest layer_;
  double ratio_ = 1;
};

TEST_F(SeekIndexE2eTest, AGzipToolLayerIsServedLazilyThroughItsSeekIndex) {
  PushAndConvert("gzip", LayerEncoding::kTarGzip, Tool({"gzip", "-6"}));
  EXPECT_EQ(convert_json_["verified_whole"], nlohmann::json::array());
  std::unique_ptr<ModelMount> m = Mount("gzip");
  ASSERT_NE(m, nullptr);
  ASSERT_OK_AND_ASSIGN(nlohmann::json stats, m->FreshStats());
  EXPECT_EQ(stats["layers"][layer_.str()], "lazy-seek-index") << stats.dump();
  EXPECT_EQ(stats["verification"], "chunk-index") << stats.dump();
  ExpectALazyFourMiBRead(*m);
  ExpectEveryFile(m->dir());
  EXPECT_OK(m->Unmount());
}

TEST_F(SeekIndexE2eTest, AZstdLayerOfFramesIsServedLazily) {
  PushAndConvert("frames", LayerEncoding::kTarZstd, ZstdFrames(tar_, 1 << 20));
  EXPECT_EQ(convert_json_["verified_whole"], nlohmann::json::array());
  std::unique_ptr<ModelMount> m = Mount("frames");
  ASSERT_NE(m, nullptr);
  ASSERT_OK_AND_ASSIGN(nlohmann::json stats, m->FreshStats());
  EXPECT_EQ(stats["layers"][layer_.str()], "lazy-seek-index") << stats.dump();
  ExpectALazyFourMiBRead(*m);
  ExpectEveryFile(m->dir());
  EXPECT_OK(m->Unmount());
}

TEST_F(SeekIndexE2eTest, AZstdToolLayerIsOneFrameAndIsDecodedWhole) {
  PushAndConvert("zstd", LayerEncoding::kTarZstd, Tool({"zstd", "-3", "-q"}));
  EXPECT_EQ(convert_json_["verified_whole"], nlohmann::json::array({layer_.str()}));
  std::unique_ptr<ModelMount> m = Mount("zstd");
  ASSERT_NE(m, nullptr);
  ASSERT_OK_AND_ASSIGN(nlohmann::json stats, m->FreshStats());
  EXPECT_EQ(stats["layers"][layer_.str()], "decoded-whole") << stats.dump();
  ExpectEveryFile(m->dir());
  EXPECT_OK(m->Unmount());
}

// Revision 2 (docs/seek-index.md, "Windows file"): a gzip layer whose inline seek index is over
// 256 KiB gets a windows file in a windows layer of V, and a mount fetches the windows table
// with V's indexes, no window before it is ready, and then only the windows of the points its
// decodes start from, each by range; the inline index (in a seek-fallback index layer, for
// older readers) is not fetched at all.
TEST_F(SeekIndexE2eTest, AGzipLayerFetchesNoWindowBeforeReadyAndOnlyTheWindowsItDecodesFrom) {
  AddWeights("big/more.bin", 48 << 20, 44);
  PushAndConvert("gzipwin", LayerEncoding::kTarGzip, Tool({"gzip", "-6"}));
  ASSERT_OK_AND_ASSIGN(ManifestResult vm, client_->GetManifest(kRepo, "gzipwin-volume"));
  ASSERT_OK_AND_ASSIGN(Manifest v, ParseManifest(vm.bytes));
  Digest windows_layer, fallback_layer;
  for (const Descriptor& d : v.layers) {
    const std::string* role = d.Annotation(kLabelRole);
    const std::string* fallback = d.Annotation(kAnnotationSeekFallback);
    if (role != nullptr && *role == kVolumeRoleWindows) windows_layer = d.digest;
    if (fallback != nullptr && *fallback == "true") fallback_layer = d.digest;
  }
  ASSERT_FALSE(windows_layer.empty()) << vm.bytes;
  ASSERT_FALSE(fallback_layer.empty()) << vm.bytes;
  ASSERT_OK_AND_ASSIGN(size_t a_index, VolumeLayerIndex(v));
  std::string a;
  ASSERT_OK(client_->GetBlob(kRepo, v.layers[a_index].digest, [&](std::string_view piece) {
    a.append(piece.data(), piece.size());
    return absl::OkStatus();
  }));
  ASSERT_OK_AND_ASSIGN(VolumeLayerContents contents, ParseVolumeLayer(a));
  ASSERT_EQ(contents.seek_windows.count(layer_), 1u);
  const SeekWindowsTable& table = contents.seek_windows.at(layer_);
  EXPECT_EQ(contents.model.revision, 2);
  std::set<uint64_t> window_lengths;
  for (const SeekWindowRef& w : table.windows) {
    if (w.length > 0) window_lengths.insert(w.length);
  }
  printf("%zu points, %llu bytes of windows table, %llu bytes of windows file\n",
         table.index.points.size(), static_cast<unsigned long long>(table.table_size()),
         static_cast<unsigned long long>(table.file_size()));

  std::unique_ptr<ModelMount> m = Mount("gzipwin");
  ASSERT_NE(m, nullptr);
  ASSERT_OK_AND_ASSIGN(nlohmann::json stats, m->FreshStats());
  EXPECT_EQ(stats["layers"][layer_.str()], "lazy-seek-index") << stats.dump();
  EXPECT_TRUE(BlobGets(windows_layer).empty());
  EXPECT_TRUE(BlobGets(fallback_layer).empty());
  EXPECT_EQ(stats["seek_windows_fetched"], 0) << stats.dump();

  ExpectALazyFourMiBRead(*m);
  std::vector<uint64_t> gets = BlobGets(windows_layer);
  EXPECT_GE(gets.size(), 1u);
  EXPECT_LE(gets.size(), 2u);  // the point before the read, and one inside it at most
  for (uint64_t n : gets) EXPECT_TRUE(window_lengths.count(n)) << n;

  ExpectEveryFile(m->dir());
  gets = BlobGets(windows_layer);
  EXPECT_LE(gets.size(), table.index.points.size() - 1);
  for (uint64_t n : gets) EXPECT_TRUE(window_lengths.count(n)) << n;
  EXPECT_TRUE(BlobGets(fallback_layer).empty());
  ASSERT_OK_AND_ASSIGN(stats, m->FreshStats());
  EXPECT_EQ(stats["seek_windows_fetched"], gets.size()) << stats.dump();
  EXPECT_OK(m->Unmount());
}

}  // namespace
}  // namespace modelfs::testing
