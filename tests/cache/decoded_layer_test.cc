// BlobCache::RegisterDecodedLayer: compressed tar layers served as the layer of their
// decompressed bytes, verified before any byte is served.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "core/cache/blob_cache.h"
#include "core/oci/tar.h"
#include "testsupport/fakes/fake_remote.h"
#include "testsupport/testing/compress.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

using ::modelfs::testing::FakeRemote;
using ::modelfs::testing::Gzip;
using ::modelfs::testing::IsOk;
using ::modelfs::testing::StatusIs;
using ::modelfs::testing::ZstdFrames;
using ::testing::AllOf;
using ::testing::HasSubstr;

// Bytes that compress like bf16 weights (about 0.8).
std::string Weights(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>(i % 2 ? 0x3c + rng() % 3 : rng());
  return out;
}

class DecodedLayerTest : public ::testing::Test {
 protected:
  std::unique_ptr<BlobCache> Open() {
    CacheOptions o;
    o.dir = dir_.Join("cache").string();
    o.fetch_threads = 2;
    o.whole_chunk_size = 64 << 10;
    o.verify_when_idle = absl::ZeroDuration();
    o.read_deadline = absl::Seconds(20);
    o.log = [](const log::Event&) {};
    auto cache = BlobCache::Open(std::move(o), &remote_);
    EXPECT_THAT(cache, IsOk());
    return cache.ok() ? std::move(*cache) : nullptr;
  }
  DecodedLayerSpec Spec(const Digest& source, const std::string& compressed, LayerEncoding enc,
                        std::optional<Digest> diff_id = {}) {
    DecodedLayerSpec s;
    s.source = source;
    s.source_size = compressed.size();
    s.encoding = enc;
    s.diff_id = diff_id;
    s.model_ref = "m1";
    return s;
  }
  std::vector<std::string> DataFiles() {
    std::vector<std::string> names;
    for (const auto& e :
         std::filesystem::directory_iterator(dir_.Join("cache") / "blobs" / "sha256")) {
      names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  // Flips byte `offset` of the data file of layer `d`.
  void ChangeDataFile(const Digest& d, uint64_t offset) {
    std::fstream f(dir_.Join("cache") / "blobs" / "sha256" / (std::string(d.hex()) + ".data"),
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offset));
    char byte = 0;
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x01);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(&byte, 1);
  }

  testing::TempDir dir_;
  FakeRemote remote_;
};

TEST_F(DecodedLayerTest, ServesAGzipLayerAsTheLayerOfItsDecompressedBytes) {
  const std::string tar = Weights(1 << 20, 1);
  const std::string gz = Gzip(tar);
  const Digest source = remote_.AddBlob(gz);
  auto cache = Open();
  ASSERT_OK_AND_ASSIGN(DecodedLayer d,
                       cache->RegisterDecodedLayer(Spec(source, gz, LayerEncoding::kTarGzip)));
  EXPECT_EQ(d.digest, Digest::Of(tar));
  EXPECT_EQ(d.size, tar.size());
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d.digest, 0, tar.size()));
  EXPECT_EQ(got, tar);
}

TEST_F(DecodedLayerTest, SealsTheDecodedLayerSoItIsServedByPassthrough) {
  const std::string tar = Weights(300000, 2);
  const std::string zst = ZstdFrames(tar, 64 << 10);
  const Digest source = remote_.AddBlob(zst);
  auto cache = Open();
  ASSERT_OK_AND_ASSIGN(DecodedLayer d, cache->RegisterDecodedLayer(Spec(
                                           source, zst, LayerEncoding::kTarZstd, Digest::Of(tar))));
  ASSERT_OK_AND_ASSIGN(BlobCache::LayerInfo info, cache->GetLayerInfo(d.digest));
  EXPECT_TRUE(info.whole_verified);
  EXPECT_EQ(info.references, 1);
  const int fd = cache->OpenVerifiedBlob(d.digest, 0, tar.size());
  ASSERT_GE(fd, 0);
  std::string bytes(tar.size(), '\0');
  EXPECT_EQ(pread(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(tar.size()));
  close(fd);
  EXPECT_EQ(bytes, tar);
}

// The compressed bytes are streamed into the decoder: they are never written to the cache.
TEST_F(DecodedLayerTest, KeepsNoCompressedCopyOfADecodedLayer) {
  const std::string tar = Weights(200000, 3);
  const std::string gz = Gzip(tar);
  const Digest source = remote_.AddBlob(gz);
  auto cache = Open();
  ASSERT_OK(cache->RegisterDecodedLayer(Spec(source, gz, LayerEncoding::kTarGzip)).status());
  EXPECT_THAT(cache->GetLayerInfo(source), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(DataFiles(), std::vector<std::string>{std::string(Digest::Of(tar).hex()) + ".data"});
  EXPECT_EQ(remote_.bytes_served(), gz.size());
}

// A stream that breaks is resumed at the byte it reached, into the same decoder: one frame of
// zstd cannot be entered in the middle, but its bytes can arrive in several requests.
TEST_F(DecodedLayerTest, ResumesABrokenStreamAtTheByteItReached) {
  const std::string tar = Weights(3 << 20, 12);
  const std::string zst = ZstdFrames(tar, 8 << 20);  // one frame
  const Digest source = remote_.AddBlob(zst);
  remote_.CutStreams(zst.size() / 3, 2);
  auto cache = Open();
  ASSERT_OK_AND_ASSIGN(DecodedLayer d,
                       cache->RegisterDecodedLayer(Spec(source, zst, LayerEncoding::kTarZstd)));
  EXPECT_EQ(d.digest, Digest::Of(tar));
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d.digest, 0, tar.size()));
  EXPECT_EQ(got, tar);
  const std::vector<FakeRemote::Request> log = remote_.log();
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[0].offset, 0u);
  EXPECT_EQ(log[1].offset, zst.size() / 3);
  EXPECT_EQ(log[2].offset, 2 * (zst.size() / 3));
  EXPECT_EQ(cache->stats().bytes_fetched, zst.size());
}

TEST_F(DecodedLayerTest, RefusesADiffIdMismatchNamingTheLayerAndBothDigestsAndServesNothing) {
  const std::string tar = Weights(200000, 4);
  const std::string gz = Gzip(tar);
  const Digest source = remote_.AddBlob(gz);
  const Digest wrong = Digest::Of("another tar");
  auto cache = Open();
  EXPECT_THAT(
      cache->RegisterDecodedLayer(Spec(source, gz, LayerEncoding::kTarGzip, wrong)),
      StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr(source.str()), HasSubstr(wrong.str()),
                                                  HasSubstr(Digest::Of(tar).str()))));
  EXPECT_THAT(cache->GetLayerInfo(Digest::Of(tar)), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(cache->GetLayerInfo(wrong), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(DataFiles(), std::vector<std::string>{});
}

TEST_F(DecodedLayerTest, RefusesACompressedLayerWhoseBytesFailItsDigest) {
  const std::string tar = Weights(200000, 5);
  std::string gz = Gzip(tar);
  const Digest source = Digest::Of(gz);
  gz[gz.size() / 2] ^= 1;
  remote_.AddBlobAs(source, gz);
  auto cache = Open();
  EXPECT_THAT(cache->RegisterDecodedLayer(Spec(source, gz, LayerEncoding::kTarGzip)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(source.str())));
  EXPECT_THAT(cache->GetLayerInfo(Digest::Of(tar)), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(DecodedLayerTest, RefusesATruncatedStreamAndKeepsNoPartialLayer) {
  const std::string tar = Weights(500000, 6);
  const std::string full = ZstdFrames(tar, 64 << 10);
  const std::string cut = full.substr(0, full.size() - 5000);  // published as is
  const Digest source = remote_.AddBlob(cut);
  auto cache = Open();
  EXPECT_THAT(cache->RegisterDecodedLayer(Spec(source, cut, LayerEncoding::kTarZstd)),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(source.str()), HasSubstr("ends inside a frame"))));
  EXPECT_EQ(DataFiles(), std::vector<std::string>{});
  EXPECT_EQ(cache->stats().verification_failures, 1u);
}

TEST_F(DecodedLayerTest, RefusesACorruptStreamWhoseBytesMatchTheLayerDigest) {
  const std::string tar = Weights(200000, 7);
  std::string gz = Gzip(tar);
  gz[gz.size() / 3] ^= 0x40;  // published corrupt: the layer digest is of these bytes
  const Digest source = remote_.AddBlob(gz);
  auto cache = Open();
  EXPECT_THAT(cache->RegisterDecodedLayer(Spec(source, gz, LayerEncoding::kTarGzip)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(source.str())));
}

TEST_F(DecodedLayerTest, FindsTheDecodedLayerAfterARestartWithoutTheRegistry) {
  const std::string tar = Weights(400000, 8);
  const std::string gz = Gzip(tar);
  const Digest source = remote_.AddBlob(gz);
  {
    auto cache = Open();
    ASSERT_OK(cache->RegisterDecodedLayer(Spec(source, gz, LayerEncoding::kTarGzip)).status());
  }
  const int requests = remote_.requests();
  remote_.Fail(absl::UnavailableError("registry down"));
  auto cache = Open();
  ASSERT_OK_AND_ASSIGN(DecodedLayer d,
                       cache->RegisterDecodedLayer(Spec(source, gz, LayerEncoding::kTarGzip)));
  EXPECT_EQ(d.digest, Digest::Of(tar));
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d.digest, 0, tar.size()));
  EXPECT_EQ(got, tar);
  EXPECT_EQ(remote_.requests(), requests);
}

TEST_F(DecodedLayerTest, DecodesAgainWhenTheDecodedFileWasWrittenToAfterItsSeal) {
  const std::string tar = Weights(300000, 9);
  const std::string gz = Gzip(tar);
  const Digest source = remote_.AddBlob(gz);
  const Digest decoded = Digest::Of(tar);
  {
    auto cache = Open();
    ASSERT_OK(cache->RegisterDecodedLayer(Spec(source, gz, LayerEncoding::kTarGzip)).status());
  }
  {
    const auto path =
        dir_.Join("cache") / "blobs" / "sha256" / (std::string(decoded.hex()) + ".data");
    FILE* f = fopen(path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    fseek(f, 1000, SEEK_SET);
    fputc('X', f);
    fclose(f);
  }
  auto cache = Open();
  ASSERT_OK_AND_ASSIGN(DecodedLayer d, cache->RegisterDecodedLayer(
                                           Spec(source, gz, LayerEncoding::kTarGzip, decoded)));
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d.digest, 0, tar.size()));
  EXPECT_EQ(got, tar);
}

// No registry serves a decoded layer's digest: a scrub finding drops it instead of fetching it.
TEST_F(DecodedLayerTest, AScrubFindingDropsADecodedLayerInsteadOfServingIt) {
  const std::string tar = Weights(300000, 7);
  const std::string gz = Gzip(tar);
  const Digest source = remote_.AddBlob(gz);
  auto cache = Open();
  ASSERT_OK_AND_ASSIGN(DecodedLayer d,
                       cache->RegisterDecodedLayer(Spec(source, gz, LayerEncoding::kTarGzip)));
  ChangeDataFile(d.digest, 1000);
  cache->ScrubOnce();
  EXPECT_EQ(cache->stats().scrub_failures, 1u);
  EXPECT_THAT(cache->GetLayerInfo(d.digest), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(cache->Read(d.digest, 0, 100), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(DecodedLayerTest, ADecodedLayerTheScrubDroppedIsDecodedAgainWhenRegisteredAgain) {
  const std::string tar = Weights(300000, 8);
  const std::string gz = Gzip(tar);
  const Digest source = remote_.AddBlob(gz);
  auto cache = Open();
  ASSERT_OK_AND_ASSIGN(DecodedLayer d,
                       cache->RegisterDecodedLayer(Spec(source, gz, LayerEncoding::kTarGzip)));
  ChangeDataFile(d.digest, 1000);
  cache->ScrubOnce();
  ASSERT_OK(cache->RegisterDecodedLayer(Spec(source, gz, LayerEncoding::kTarGzip)).status());
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d.digest, 0, tar.size()));
  EXPECT_EQ(got, tar);
}

// The member files are written as the tar streams past, whatever headers come before each
// file: pax and GNU long names, directories, links and small files between them. Every larger
// file gets a member of its own (so passthrough), the small ones stay in the data file, and
// every byte reads back right.
class DecodedLayerSplitTest : public DecodedLayerTest,
                              public ::testing::WithParamInterface<TarWriter::LongNames> {};

TEST_P(DecodedLayerSplitTest, WritesEachLargerFileOfTheStreamToAMemberFileOfItsOwn) {
  TarWriter writer(GetParam());
  const std::string long_dir(120, 'd');
  ASSERT_OK(writer.AddDirectory("weights"));
  ASSERT_OK(writer.AddFile("weights/a.safetensors", Weights(200000, 21)));
  ASSERT_OK(writer.AddFile("config.json", "{}"));
  ASSERT_OK(writer.AddFile(long_dir + "/b.safetensors", Weights(70000, 22)));
  ASSERT_OK(writer.AddSymlink("latest", "weights/a.safetensors"));
  ASSERT_OK(writer.AddHardLink("weights/a-again.safetensors", "weights/a.safetensors"));
  ASSERT_OK(writer.AddFile("small.bin", Weights(65535, 23)));  // one byte under the member size
  ASSERT_OK(writer.AddFile("exact.bin", Weights(65536, 24)));
  const std::string tar = writer.Finish();
  ASSERT_OK_AND_ASSIGN(std::vector<TarEntry> entries, IndexTarBytes(tar));
  const std::string zst = ZstdFrames(tar, tar.size() + 1);  // one frame: decoded whole
  const Digest source = remote_.AddBlob(zst);
  auto cache = Open();
  ASSERT_OK_AND_ASSIGN(DecodedLayer d, cache->RegisterDecodedLayer(Spec(
                                           source, zst, LayerEncoding::kTarZstd, Digest::Of(tar))));
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d.digest, 0, tar.size()));
  EXPECT_EQ(got, tar);
  int members = 0;
  for (const TarEntry& e : entries) {
    if (e.type != TarEntryType::kFile) continue;
    const int fd = cache->OpenVerifiedFile(d.digest, e.data_offset, e.size);
    if (e.size < (64u << 10)) {
      EXPECT_EQ(fd, -1) << e.path;
      continue;
    }
    ++members;
    ASSERT_GE(fd, 0) << e.path;
    std::string bytes(e.size, '\0');
    EXPECT_EQ(pread(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(e.size));
    close(fd);
    EXPECT_EQ(bytes, tar.substr(e.data_offset, e.size)) << e.path;
  }
  EXPECT_EQ(members, 3);
}

INSTANTIATE_TEST_SUITE_P(LongNames, DecodedLayerSplitTest,
                         ::testing::Values(TarWriter::LongNames::kPax, TarWriter::LongNames::kGnu),
                         [](const ::testing::TestParamInfo<TarWriter::LongNames>& p) {
                           return p.param == TarWriter::LongNames::kPax ? std::string("Pax")
                                                                        : std::string("Gnu");
                         });

// A stream that is no tar: nothing is split, every byte is served.
TEST_F(DecodedLayerTest, ServesAStreamThatIsNoTarWholeFromItsDataFile) {
  const std::string bytes = Weights(300000, 25);
  const std::string zst = ZstdFrames(bytes, bytes.size() + 1);
  const Digest source = remote_.AddBlob(zst);
  auto cache = Open();
  ASSERT_OK_AND_ASSIGN(DecodedLayer d,
                       cache->RegisterDecodedLayer(Spec(source, zst, LayerEncoding::kTarZstd)));
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d.digest, 0, bytes.size()));
  EXPECT_EQ(got, bytes);
  const int fd = cache->OpenVerifiedBlob(d.digest, 0, bytes.size());
  EXPECT_GE(fd, 0);
  if (fd >= 0) close(fd);
}

// A real tar: its larger files are split into member files as the layer is installed, and
// each is handed out for passthrough once the layer is sealed.
TEST_F(DecodedLayerTest, SplitsTheLargerFilesOfADecodedTarIntoMemberFilesForPassthrough) {
  TarWriter writer;
  const std::string weights = Weights(300000, 11), small = "{\"a\": 1}";
  ASSERT_OK(writer.AddFile("model.safetensors", weights));
  ASSERT_OK(writer.AddFile("config.json", small));
  const std::string tar = writer.Finish();
  ASSERT_OK_AND_ASSIGN(std::vector<TarEntry> entries, IndexTarBytes(tar));
  ASSERT_EQ(entries.size(), 2u);
  const uint64_t at = entries[0].data_offset;
  const std::string zst = ZstdFrames(tar, 64 << 10);
  const Digest source = remote_.AddBlob(zst);
  {
    auto cache = Open();
    ASSERT_OK_AND_ASSIGN(
        DecodedLayer d,
        cache->RegisterDecodedLayer(Spec(source, zst, LayerEncoding::kTarZstd, Digest::Of(tar))));
    ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d.digest, 0, tar.size()));
    EXPECT_EQ(got, tar);
    EXPECT_EQ(cache->OpenVerifiedBlob(d.digest, 0, tar.size()), -1);  // the tar file has holes
    EXPECT_EQ(cache->OpenVerifiedFile(d.digest, entries[1].data_offset, small.size()), -1);
    const int fd = cache->OpenVerifiedFile(d.digest, at, weights.size());
    ASSERT_GE(fd, 0);
    std::string bytes(weights.size(), '\0');
    EXPECT_EQ(pread(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(weights.size()));
    close(fd);
    EXPECT_EQ(bytes, weights);
    // The loader names the same files again at mount: no change.
    EXPECT_OK(cache->SetLayerMembers(
        d.digest, {{at, weights.size()}, {entries[1].data_offset, small.size()}}));
  }
  const auto blobs = dir_.Join("cache") / "blobs" / "sha256";
  const Digest decoded = Digest::Of(tar);
  std::ifstream data(blobs / (std::string(decoded.hex()) + ".data"), std::ios::binary);
  const std::string on_disk((std::istreambuf_iterator<char>(data)), {});
  ASSERT_EQ(on_disk.size(), tar.size());
  EXPECT_EQ(on_disk.substr(at, weights.size()), std::string(weights.size(), '\0'));
  EXPECT_EQ(on_disk.substr(0, at), tar.substr(0, at));
  std::ifstream member(blobs / (std::string(decoded.hex()) + ".members") / std::to_string(at),
                       std::ios::binary);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(member)), {}), weights);
  // After a restart: found sealed, with its member file, without the registry.
  remote_.ResetCounters();
  auto cache = Open();
  ASSERT_OK_AND_ASSIGN(DecodedLayer d, cache->RegisterDecodedLayer(Spec(
                                           source, zst, LayerEncoding::kTarZstd, Digest::Of(tar))));
  EXPECT_EQ(remote_.requests(), 0);
  const int fd = cache->OpenVerifiedFile(d.digest, at, weights.size());
  EXPECT_GE(fd, 0);
  if (fd >= 0) close(fd);
  ASSERT_OK_AND_ASSIGN(std::string got, cache->Read(d.digest, 0, tar.size()));
  EXPECT_EQ(got, tar);
}

}  // namespace
}  // namespace modelfs
