// Compressed tar layers (.tar+gzip, .tar+zstd of many frames) of a ModelPack artifact built
// here with the spec's media types and diffIds, pushed to a real registry, then mounted with
// `modelfs mount`, pulled and converted: every byte read equals the original, and a layer
// whose decompressed bytes do not match its diffId is refused as a verification failure. Also
// `push --compress zstd`, and the passthrough_opens counter of `modelfs stats`, which counts
// the larger files of tar layers (decoded or not) once their layer is sealed.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/oci/digest.h"
#include "core/oci/manifest.h"
#include "core/oci/modelpack.h"
#include "core/oci/tar.h"
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

using ::testing::HasSubstr;

constexpr char kRepo[] = "models/compressed";

class CompressedLayersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0 || !std::filesystem::exists("/dev/fuse")) {
      if (const char* ci = getenv("CI"); ci != nullptr && std::string(ci) == "true") {
        FAIL() << "needs root and /dev/fuse (CI=true: a missing component fails)";
      }
      GTEST_SKIP() << "needs root and /dev/fuse";
    }
    BecomeSubreaper();
    ASSERT_OK_AND_ASSIGN(registry_, RegistryFixture::Start());
    const std::string src = tmp_.Join("src").string();
    ASSERT_OK_AND_ASSIGN(std::vector<std::string> files, WriteTestModel(src, /*seed=*/28));
    TarWriter tar;
    for (const std::string& f : files) {
      want_[f] = ReadFileOrDie(src + "/" + f);
      ASSERT_OK(tar.AddFile(f, want_[f]));
    }
    // Past several zstd frames and the cache's 4 MiB whole-layer chunks, at bf16's ratio.
    std::mt19937 rng(28);
    std::string weights(9 << 20, '\0');
    for (size_t i = 0; i < weights.size(); ++i) {
      weights[i] = static_cast<char>(i % 2 ? 0x3c + rng() % 3 : rng());
    }
    want_["extra/weights.bin"] = weights;
    ASSERT_OK(tar.AddFile("extra/weights.bin", weights));
    tar_ = tar.Finish();
    ASSERT_OK_AND_ASSIGN(client_, ConnectPlainHttp(registry_->host_port()));
  }

  // Pushes M:`tag` with one compressed tar layer of tar_ and `diff_id` in its config.
  void PushModel(const std::string& tag, LayerEncoding encoding, const std::string& compressed,
                 const Digest& diff_id) {
    ASSERT_OK_AND_ASSIGN(Digest layer, UploadBlob(*client_, kRepo, compressed));
    ModelPackConfig config;
    config.config.format = "safetensors";
    config.modelfs.diff_ids = {diff_id};
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
  }

  std::string Ref(const std::string& tag) const {
    return absl::StrCat(registry_->host_port(), "/", kRepo, ":", tag);
  }

  // Every regular file under `dir` but .modelinfo.json is one of the tar's, byte for byte.
  void ExpectTheTarsFiles(const std::string& dir) {
    std::map<std::string, std::string> got = DescribeFiles(dir);
    got.erase(".modelinfo.json");
    std::map<std::string, std::string> want;
    for (const auto& [path, bytes] : want_) want[path] = Digest::Of(bytes).str();
    EXPECT_EQ(got, want);
    EXPECT_EQ(ReadFileOrDie(dir + "/extra/weights.bin"), want_["extra/weights.bin"]);
  }

  std::unique_ptr<ModelMount> Mount(const std::string& tag) {
    MountOptions o;
    o.cache_dir = tmp_.Join("cache").string();
    const std::string dir = tmp_.Join("mnt-" + tag).string();
    std::filesystem::create_directories(dir);
    absl::StatusOr<std::unique_ptr<ModelMount>> m = ModelMount::Start(Ref(tag), dir, o);
    EXPECT_OK(m.status());
    return m.ok() ? std::move(*m) : nullptr;
  }

  TempDir tmp_;
  std::unique_ptr<RegistryFixture> registry_;
  std::unique_ptr<RegistryClient> client_;
  std::map<std::string, std::string> want_;
  std::string tar_;
};

TEST_F(CompressedLayersTest, MountServesEveryByteOfAGzipTarLayer) {
  PushModel("gzip", LayerEncoding::kTarGzip, Gzip(tar_, "model.tar"), Digest::Of(tar_));
  std::unique_ptr<ModelMount> m = Mount("gzip");
  ASSERT_NE(m, nullptr);
  ExpectTheTarsFiles(m->dir());
  EXPECT_OK(m->Unmount());
}

TEST_F(CompressedLayersTest, MountServesEveryByteOfAZstdTarLayerOfManyFrames) {
  PushModel("zstd", LayerEncoding::kTarZstd, ZstdFrames(tar_, 1 << 20), Digest::Of(tar_));
  std::unique_ptr<ModelMount> m = Mount("zstd");
  ASSERT_NE(m, nullptr);
  ExpectTheTarsFiles(m->dir());
  EXPECT_OK(m->Unmount());
}

TEST_F(CompressedLayersTest, MountRefusesALayerWhoseDecompressedBytesMissTheDiffIdWithExit1) {
  const std::string gz = Gzip(tar_);
  const Digest lie = Digest::Of("another tar");
  PushModel("lie", LayerEncoding::kTarGzip, gz, lie);
  const std::string dir = tmp_.Join("mnt-lie").string();
  std::filesystem::create_directories(dir);
  ASSERT_OK_AND_ASSIGN(ProcessResult r, RunModelfs({"mount", "--plain-http", "--cache",
                                                    tmp_.Join("cache").string(), Ref("lie"), dir}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(Digest::Of(gz).str()));
  EXPECT_THAT(r.err, HasSubstr(lie.str()));
  EXPECT_THAT(r.err, HasSubstr(Digest::Of(tar_).str()));
  EXPECT_FALSE(FindMount(std::filesystem::canonical(dir).string()).has_value());
}

TEST_F(CompressedLayersTest, MountRefusesATruncatedZstdLayerWithExit1AndMountsNothing) {
  const std::string full = ZstdFrames(tar_, 1 << 20);
  const std::string cut = full.substr(0, full.size() - 100000);  // published cut: digest matches
  PushModel("cut", LayerEncoding::kTarZstd, cut, Digest::Of(tar_));
  const std::string dir = tmp_.Join("mnt-cut").string();
  std::filesystem::create_directories(dir);
  ASSERT_OK_AND_ASSIGN(ProcessResult r, RunModelfs({"mount", "--plain-http", "--cache",
                                                    tmp_.Join("cache").string(), Ref("cut"), dir}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(Digest::Of(cut).str()));
  EXPECT_THAT(r.err, HasSubstr("ends inside a frame"));
  EXPECT_FALSE(FindMount(std::filesystem::canonical(dir).string()).has_value());
}

TEST_F(CompressedLayersTest, PullRefusesAGzipLayerWithACorruptByteWithExit1AndLeavesNoDest) {
  std::string gz = Gzip(tar_);
  gz[gz.size() / 2] ^= 0x10;  // published corrupt: the layer digest is of these bytes
  PushModel("corrupt", LayerEncoding::kTarGzip, gz, Digest::Of(tar_));
  const std::string dest = tmp_.Join("dest-corrupt").string();
  ASSERT_OK_AND_ASSIGN(ProcessResult r, RunModelfs({"pull", "--plain-http", Ref("corrupt"), dest}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(Digest::Of(gz).str()));
  EXPECT_FALSE(std::filesystem::exists(dest));
}

TEST_F(CompressedLayersTest, PullExtractsEveryFileOfAZstdTarLayer) {
  PushModel("zstd", LayerEncoding::kTarZstd, ZstdFrames(tar_, 1 << 20), Digest::Of(tar_));
  const std::string dest = tmp_.Join("dest").string();
  ASSERT_OK_AND_ASSIGN(ProcessResult r, RunModelfs({"pull", "--plain-http", Ref("zstd"), dest}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectTheTarsFiles(dest);
}

TEST_F(CompressedLayersTest, ConvertWritesAVolumeImageWithASeekIndexThatMounts) {
  const std::string gz = Gzip(tar_);
  PushModel("gzip", LayerEncoding::kTarGzip, gz, Digest::Of(tar_));
  ASSERT_OK_AND_ASSIGN(ProcessResult c,
                       RunModelfs({"convert", "--plain-http", "--json", Ref("gzip")}));
  ASSERT_EQ(c.exit_code, 0) << c.err;
  nlohmann::json j = ParseJsonOutput(c.out);
  // Served lazily through its seek index (integration/mount/seek_index_e2e_test.cc).
  EXPECT_EQ(j["verified_whole"], nlohmann::json::array());
  std::unique_ptr<ModelMount> m = Mount("gzip-volume");
  ASSERT_NE(m, nullptr);
  ExpectTheTarsFiles(m->dir());
  EXPECT_OK(m->Unmount());
}

TEST_F(CompressedLayersTest, PushCompressZstdWritesFramedLayersThatZstdReadsAndAMountServes) {
  const std::string src = tmp_.Join("src").string();
  ASSERT_OK_AND_ASSIGN(ProcessResult p, RunModelfs({"push", "--plain-http", "--json", "--compress",
                                                    "zstd", Ref("pushed"), src}));
  ASSERT_EQ(p.exit_code, 0) << p.err;
  nlohmann::json j = ParseJsonOutput(p.out);
  const uint64_t tars = j["uncompressed_bytes"].get<uint64_t>();
  const uint64_t compressed = j["compressed_bytes"].get<uint64_t>();
  EXPECT_GT(tars, 0u);
  EXPECT_LT(compressed, tars);
  uint64_t layer_bytes = 0;
  int layers = 0;
  for (const auto& b : j["blobs"]) {
    const std::string role = b["role"].get<std::string>();
    if (role == "config" || role == "volume layer" || role == "volume config") continue;
    const std::string mt = b["mediaType"].get<std::string>();
    EXPECT_THAT(mt, ::testing::EndsWith(".tar+zstd"));
    layer_bytes += b["size"].get<uint64_t>();
    ++layers;
    // A standard stream: the zstd tool decodes the layer to a tar holding the file.
    ASSERT_OK_AND_ASSIGN(std::string blob,
                         FetchBlob(*client_, kRepo, b["digest"].get<std::string>()));
    const std::string zst = tmp_.Join("layer.zst").string();
    {
      FILE* f = fopen(zst.c_str(), "wb");
      ASSERT_NE(f, nullptr);
      fwrite(blob.data(), 1, blob.size(), f);
      fclose(f);
    }
    ASSERT_OK_AND_ASSIGN(CommandResult d, RunCommand({"zstd", "-d", "-f", "-q", zst}));
    EXPECT_EQ(d.exit_code, 0) << d.err;
    const std::string tar = ReadFileOrDie(tmp_.Join("layer").string());
    EXPECT_EQ(tar.substr(0, role.size()), role);  // the tar's first header names the file
  }
  EXPECT_EQ(layers, static_cast<int>(want_.size()) - 1);  // the extra weights were not pushed
  EXPECT_EQ(layer_bytes, compressed);
  want_.erase("extra/weights.bin");
  MountOptions o;
  o.cache_dir = tmp_.Join("cache").string();
  const std::string dir = tmp_.Join("mnt-pushed").string();
  std::filesystem::create_directories(dir);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ModelMount> m,
                       ModelMount::Start(Ref("pushed-volume"), dir, o));
  std::map<std::string, std::string> got = DescribeFiles(dir);
  got.erase(".modelinfo.json");
  std::map<std::string, std::string> want;
  for (const auto& [path, bytes] : want_) want[path] = Digest::Of(bytes).str();
  EXPECT_EQ(got, want);
  EXPECT_OK(m->Unmount());
}

TEST_F(CompressedLayersTest, StatsCountPassthroughOpensOnceRawLayersAreSealed) {
  const std::string src = tmp_.Join("src").string();
  ASSERT_OK_AND_ASSIGN(ProcessResult p, RunModelfs({"push", "--plain-http", Ref("raw"), src}));
  ASSERT_EQ(p.exit_code, 0) << p.err;
  want_.erase("extra/weights.bin");
  std::unique_ptr<ModelMount> m = Mount("raw-volume");
  ASSERT_NE(m, nullptr);
  for (const auto& [path, bytes] : want_) EXPECT_EQ(ReadFileOrDie(m->dir() + "/" + path), bytes);
  // Each layer is sealed once all its chunks are verified and flushed, in the background.
  nlohmann::json stats;
  for (int i = 0; i < 100; ++i) {
    ASSERT_OK_AND_ASSIGN(stats, m->FreshStats());
    if (stats["sealed_layers"].get<size_t>() == want_.size()) break;
  }
  ASSERT_EQ(stats["sealed_layers"].get<size_t>(), want_.size()) << stats.dump();
  const uint64_t before = stats["passthrough_opens"].get<uint64_t>();
  for (const auto& [path, bytes] : want_) EXPECT_EQ(ReadFileOrDie(m->dir() + "/" + path), bytes);
  ASSERT_OK_AND_ASSIGN(stats, m->FreshStats());
  EXPECT_EQ(stats["passthrough_opens"].get<uint64_t>() - before, want_.size()) << stats.dump();
  EXPECT_OK(m->Unmount());
}

// The files of a tar layer (decoded or not) of at least the cache's member size (64 KiB) are
// kept in files of their own once the loader has read the tar's headers, and served by
// passthrough once the layer is verified and sealed: a second open of each is passthrough,
// and read() and mmap see the right bytes. Smaller files stay with the daemon.
void ExpectLargerTarFilesServedByPassthrough(ModelMount& m,
                                             const std::map<std::string, std::string>& want) {
  constexpr size_t kMemberMin = 64 << 10;
  size_t large = 0;
  for (const auto& [path, bytes] : want) large += bytes.size() >= kMemberMin;
  ASSERT_GT(large, 0u);
  // The first full read. These layers have no chunk index: each is verified and sealed whole
  // before its first byte is served, so the reads below find it sealed.
  for (const auto& [path, bytes] : want) EXPECT_EQ(ReadFileOrDie(m.dir() + "/" + path), bytes);
  ASSERT_OK_AND_ASSIGN(nlohmann::json stats, m.FreshStats());
  const uint64_t before = stats["passthrough_opens"].get<uint64_t>();
  for (const auto& [path, bytes] : want) {
    const std::string file = m.dir() + "/" + path;
    EXPECT_EQ(ReadFileOrDie(file), bytes) << path;
    const int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << path;
    void* map = mmap(nullptr, bytes.size(), PROT_READ, MAP_PRIVATE, fd, 0);
    ASSERT_NE(map, MAP_FAILED) << path;
    EXPECT_EQ(std::string(static_cast<const char*>(map), bytes.size()), bytes) << path;
    munmap(map, bytes.size());
    close(fd);
  }
  ASSERT_OK_AND_ASSIGN(stats, m.FreshStats());
  // Two opens of each larger file (read, then mmap), none of a smaller one.
  EXPECT_EQ(stats["passthrough_opens"].get<uint64_t>() - before, 2 * large) << stats.dump();
}

TEST_F(CompressedLayersTest, LargerFilesOfADecodedZstdTarLayerAreServedByPassthrough) {
  PushModel("zstd-pt", LayerEncoding::kTarZstd, ZstdFrames(tar_, 1 << 20), Digest::Of(tar_));
  std::unique_ptr<ModelMount> m = Mount("zstd-pt");
  ASSERT_NE(m, nullptr);
  ExpectLargerTarFilesServedByPassthrough(*m, want_);
  EXPECT_OK(m->Unmount());
}

TEST_F(CompressedLayersTest, LargerFilesOfAPlainTarLayerAreServedByPassthrough) {
  PushModel("tar-pt", LayerEncoding::kTar, tar_, Digest::Of(tar_));
  std::unique_ptr<ModelMount> m = Mount("tar-pt");
  ASSERT_NE(m, nullptr);
  ExpectLargerTarFilesServedByPassthrough(*m, want_);
  EXPECT_OK(m->Unmount());
}

}  // namespace
}  // namespace modelfs::testing
