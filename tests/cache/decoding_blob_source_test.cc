// DecodingBlobSource under the real BlobCache: a compressed tar layer with a seek index is
// registered as the chunk-mode layer of its uncompressed bytes (its diffId) and served span by
// span from the compressed blob; every byte is checked against the chunk hashes of the
// uncompressed bytes, so corrupt spans, lying points and wrong windows end in kDataLoss.
#include "core/cache/decoding_blob_source.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

#include "core/cache/blob_cache.h"
#include "core/oci/chunk_index.h"
#include "core/oci/seek_windows.h"
#include "testsupport/fakes/fake_remote.h"
#include "testsupport/fakes/fake_xor_codec.h"
#include "testsupport/testing/compress.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

using ::modelfs::testing::FakeRemote;
using ::modelfs::testing::IsOk;
using ::modelfs::testing::StatusIs;

constexpr uint64_t kChunk = 1 << 20;

std::string Weights(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>(i % 2 ? 0x3c + rng() % 3 : rng());
  return out;
}

class DecodingBlobSourceTest : public ::testing::Test {
 protected:
  void SetUp() override { plain_ = Weights(24 << 20, 28); }

  // Publishes `compressed` and registers its uncompressed bytes with the cache, served through
  // `seek` (built from the bytes unless given).
  void Serve(LayerEncoding encoding, const std::string& compressed,
             std::optional<SeekIndex> seek = std::nullopt) {
    compressed_ = remote_.AddBlob(compressed);
    if (!seek) {
      absl::StatusOr<SeekIndex> built = BuildSeekIndex(encoding, compressed);
      ASSERT_THAT(built, IsOk());
      seek = *built;
    }
    seek_ = *seek;
    diff_id_ = Digest::Of(plain_);
    ChunkIndex idx = BuildChunkIndex(plain_, kChunk, ChunkDigestAlgorithm::kBlake3);
    idx.content = ChunkIndex::Content::kUncompressed;
    decoding_.Add(std::make_shared<const SeekIndex>(seek_));
    CacheOptions o;
    o.dir = dir_.Join("cache").string();
    o.fetch_threads = 4;
    o.verify_when_idle = absl::ZeroDuration();
    o.read_deadline = absl::Seconds(20);
    o.log = [](const log::Event&) {};
    if (no_readahead_) o.readahead_min = o.readahead_max = 1ull << 40;
    auto cache = BlobCache::Open(std::move(o), &decoding_);
    ASSERT_THAT(cache, IsOk());
    cache_ = std::move(*cache);
    LayerSpec spec;
    spec.digest = diff_id_;
    spec.size = plain_.size();
    spec.index = idx;
    spec.mode = VerifyMode::kChunk;
    spec.model_ref = "m";
    ASSERT_OK(cache_->RegisterLayer(spec));
  }

  testing::TempDir dir_;
  FakeRemote remote_;
  DecodingBlobSource decoding_{&remote_};
  std::unique_ptr<BlobCache> cache_;
  bool no_readahead_ = false;
  std::string plain_;
  Digest compressed_, diff_id_;
  SeekIndex seek_;
};

TEST_F(DecodingBlobSourceTest, ServesEveryByteOfAGzipLayerThroughItsSeekIndex) {
  Serve(LayerEncoding::kTarGzip, testing::Gzip(plain_));
  ASSERT_GE(seek_.points.size(), 5u);
  ASSERT_OK_AND_ASSIGN(std::string got, cache_->Read(diff_id_, 0, plain_.size()));
  EXPECT_TRUE(got == plain_);
}

TEST_F(DecodingBlobSourceTest, ServesAZstdLayerOfManyFrames) {
  Serve(LayerEncoding::kTarZstd, testing::ZstdFrames(plain_, kChunk));
  EXPECT_EQ(seek_.points.size(), 24u);
  ASSERT_OK_AND_ASSIGN(std::string got, cache_->Read(diff_id_, 5 * kChunk + 7, 3 * kChunk));
  EXPECT_TRUE(got == plain_.substr(5 * kChunk + 7, 3 * kChunk));
}

TEST_F(DecodingBlobSourceTest, ALongRangeOfFramesIsOneRequestForItsMiddleSpans) {
  Serve(LayerEncoding::kTarZstd, testing::ZstdFrames(plain_, kChunk));
  ASSERT_EQ(seek_.points.size(), 24u);
  remote_.ResetCounters();
  // 16 frames from the middle of frame 2: frame 2 and frame 18 through the span table, the 15
  // whole frames between them from one fetch (what a cache stream request asks).
  std::string got;
  ASSERT_OK(decoding_.StreamRange(diff_id_, 2 * kChunk + 100, 16 * kChunk, absl::InfiniteFuture(),
                                  [&](absl::string_view piece) {
                                    got.append(piece.data(), piece.size());
                                    return absl::OkStatus();
                                  }));
  EXPECT_TRUE(got == plain_.substr(2 * kChunk + 100, 16 * kChunk));
  std::string log;
  for (const auto& r : remote_.log()) log += absl::StrCat(" ", r.offset, "+", r.length);
  EXPECT_LE(remote_.requests(), 3) << log;
  // And a short range still goes span by span, through the table its neighbours share.
  remote_.ResetCounters();
  ASSERT_OK_AND_ASSIGN(std::string two, decoding_.FetchRange(diff_id_, 20 * kChunk, 2 * kChunk,
                                                             absl::InfiniteFuture()));
  EXPECT_TRUE(two == plain_.substr(20 * kChunk, 2 * kChunk));
  EXPECT_EQ(remote_.requests(), 2);
}

TEST_F(DecodingBlobSourceTest, AFourMiBRandomReadFetchesAtMostEightMiBOfCompressedBytes) {
  // The cache's readahead for a sequential run (4 MiB more after 4 MiB, for raw layers too)
  // is its own policy: this measures what the read itself costs.
  no_readahead_ = true;
  const std::string gz = testing::Gzip(plain_);
  Serve(LayerEncoding::kTarGzip, gz);
  std::mt19937 rng(4);
  for (int i = 0; i < 4; ++i) {
    remote_.ResetCounters();
    const uint64_t off = rng() % (plain_.size() - (4 << 20));
    // As the kernel sends it: 1 MiB requests.
    for (uint64_t at = off; at < off + (4 << 20); at += kChunk) {
      ASSERT_OK_AND_ASSIGN(std::string got, cache_->Read(diff_id_, at, kChunk));
      ASSERT_TRUE(got == plain_.substr(at, kChunk)) << at;
    }
    std::string log;
    for (const auto& r : remote_.log()) log += absl::StrCat(" ", r.offset, "+", r.length);
    const auto st = decoding_.stats();
    EXPECT_LE(remote_.bytes_served(), 8u << 20)
        << "read at " << off << ":" << log << " lead-in " << st.lead_in_bytes;
  }
}

TEST_F(DecodingBlobSourceTest, ConcurrentReadersOfOneSpanGetTheirBytesAndDecodeItOnce) {
  const std::string gz = testing::Gzip(plain_);
  Serve(LayerEncoding::kTarGzip, gz);
  // Eight readers, each on its own chunk of the second and third spans, at once.
  const uint64_t base = seek_.points[1].uncompressed_offset;
  std::vector<std::thread> readers;
  std::vector<absl::Status> results(8);
  for (int i = 0; i < 8; ++i) {
    readers.emplace_back([&, i] {
      const uint64_t off = base + static_cast<uint64_t>(i) * kChunk;
      absl::StatusOr<std::string> got = cache_->Read(diff_id_, off, 4096);
      results[i] = !got.ok()                          ? got.status()
                   : *got != plain_.substr(off, 4096) ? absl::DataLossError("wrong bytes")
                                                      : absl::OkStatus();
    });
  }
  for (std::thread& t : readers) t.join();
  for (const absl::Status& r : results) EXPECT_OK(r);
  // Each byte of the layer was fetched at most once.
  EXPECT_LE(remote_.bytes_served(), gz.size());
}

TEST_F(DecodingBlobSourceTest, CorruptCompressedBytesAreDataLossAndNeverServed) {
  const std::string gz = testing::Gzip(plain_);
  Serve(LayerEncoding::kTarGzip, gz);
  // Every answer carrying this byte is corrupt: a lying registry, not a transient fault.
  const uint64_t bad = seek_.points[2].compressed_offset + 5000;
  remote_.CorruptByte(compressed_, bad);
  const uint64_t off = seek_.points[2].uncompressed_offset;
  EXPECT_THAT(cache_->Read(diff_id_, off, kChunk), StatusIs(absl::StatusCode::kDataLoss));
  // Elsewhere the layer is served.
  ASSERT_OK_AND_ASSIGN(std::string got, cache_->Read(diff_id_, 0, kChunk));
  EXPECT_TRUE(got == plain_.substr(0, kChunk));
}

TEST_F(DecodingBlobSourceTest, AFlippedByteInOneAnswerIsRefetchedAndThenServed) {
  const std::string gz = testing::Gzip(plain_);
  Serve(LayerEncoding::kTarGzip, gz);
  const uint64_t bad = seek_.points[1].compressed_offset + 100000;
  remote_.CorruptByte(compressed_, bad, /*answers=*/1);
  const uint64_t off = seek_.points[1].uncompressed_offset;
  absl::StatusOr<std::string> got = cache_->Read(diff_id_, off, 2 * kChunk);
  ASSERT_THAT(got, IsOk());
  EXPECT_TRUE(*got == plain_.substr(off, 2 * kChunk));
}

TEST_F(DecodingBlobSourceTest, ALyingSeekPointIsCaughtByTheChunkHashes) {
  const std::string gz = testing::Gzip(plain_);
  ASSERT_OK_AND_ASSIGN(SeekIndex lie, BuildSeekIndex(LayerEncoding::kTarGzip, gz));
  ASSERT_GE(lie.points.size(), 4u);
  lie.points[2].uncompressed_offset += 4096;  // the bytes decoded from it land 4 KiB late
  Serve(LayerEncoding::kTarGzip, gz, lie);
  const uint64_t off = lie.points[2].uncompressed_offset + kChunk;
  EXPECT_THAT(cache_->Read(diff_id_, off - off % kChunk, kChunk),
              StatusIs(absl::StatusCode::kDataLoss));
}

TEST_F(DecodingBlobSourceTest, AWindowThatDoesNotMatchIsCaughtByTheChunkHashes) {
  const std::string gz = testing::Gzip(plain_);
  ASSERT_OK_AND_ASSIGN(SeekIndex lie, BuildSeekIndex(LayerEncoding::kTarGzip, gz));
  ASSERT_GE(lie.points.size(), 4u);
  // A well-formed window of the right size holding other bytes: the window of point 3.
  SeekPoint& p = lie.points[2];
  p.window = lie.points[3].window;
  p.window_size = lie.points[3].window_size;
  Serve(LayerEncoding::kTarGzip, gz, lie);
  // The window matters to the first 32 KiB after the point: the chunk holding them.
  const uint64_t off = p.uncompressed_offset - p.uncompressed_offset % kChunk;
  EXPECT_THAT(cache_->Read(diff_id_, off, kChunk), StatusIs(absl::StatusCode::kDataLoss));
}

TEST_F(DecodingBlobSourceTest, ATruncatedLayerIsDataLoss) {
  const std::string zst = testing::ZstdFrames(plain_, kChunk);
  ASSERT_OK_AND_ASSIGN(SeekIndex seek, BuildSeekIndex(LayerEncoding::kTarZstd, zst));
  // The registry holds a cut stream under the full stream's digest.
  const std::string cut = zst.substr(0, zst.size() - 200000);
  remote_.AddBlobAs(seek.layer_digest, cut);
  seek.compressed_size = cut.size();
  Serve(LayerEncoding::kTarZstd, cut, seek);
  EXPECT_THAT(cache_->Read(diff_id_, plain_.size() - kChunk, kChunk),
              StatusIs(absl::StatusCode::kDataLoss));
}

// Windows fetched per point (core/cache/seek_window_source.h): the layer is served through its
// windows table, and a decode fetches only the window of the point it starts from.
class WindowedDecodingTest : public DecodingBlobSourceTest {
 protected:
  void ServeWindowed() {
    no_readahead_ = true;
    Serve(LayerEncoding::kTarGzip, testing::Gzip(plain_));
    ASSERT_GE(seek_.points.size(), 5u);
    const std::string file = SerializeSeekWindows(seek_);
    win_ = remote_.AddBlob(file);
    ASSERT_OK_AND_ASSIGN(SeekWindowsTable t, ParseSeekWindowsTable(file));
    table_ = std::make_shared<const SeekWindowsTable>(std::move(t));
    windows_ = std::make_shared<SeekWindowSource>(
        table_,
        [this](uint64_t off, uint64_t len, absl::Time deadline) {
          return remote_.FetchRange(win_, off, len, deadline);
        },
        "layer");
    decoding_.AddWithWindows(windows_);
    remote_.ResetCounters();
  }
  // Window requests so far, by file offset.
  std::vector<uint64_t> WindowFetches() const {
    std::vector<uint64_t> out;
    for (const auto& r : remote_.log()) {
      if (r.blob == win_) out.push_back(r.offset);
    }
    return out;
  }

  Digest win_;
  std::shared_ptr<const SeekWindowsTable> table_;
  std::shared_ptr<SeekWindowSource> windows_;
};

TEST_F(WindowedDecodingTest, AReadFetchesOnlyTheWindowOfThePointItDecodesFrom) {
  ServeWindowed();
  EXPECT_TRUE(WindowFetches().empty());
  const size_t k = 3;
  // The cache fetches whole chunks: the first chunk that lies in the span of point k.
  const uint64_t at = (table_->index.points[k].uncompressed_offset + kChunk - 1) / kChunk * kChunk;
  ASSERT_LE(at + kChunk, table_->index.points[k + 1].uncompressed_offset);
  ASSERT_OK_AND_ASSIGN(std::string got, cache_->Read(diff_id_, at, 100000));
  EXPECT_TRUE(got == plain_.substr(at, 100000));
  EXPECT_EQ(WindowFetches(), std::vector<uint64_t>{table_->windows[k].offset});
  // Every byte: no window twice (the one of point 3 is held), none for the first point (a
  // stream start), and none for points a decoder running from an earlier point passes (the
  // middle spans of a long range are decoded from one point: StreamDirect).
  ASSERT_OK_AND_ASSIGN(std::string all, cache_->Read(diff_id_, 0, plain_.size()));
  EXPECT_TRUE(all == plain_);
  std::vector<uint64_t> fetched = WindowFetches();
  std::sort(fetched.begin(), fetched.end());
  EXPECT_TRUE(std::adjacent_find(fetched.begin(), fetched.end()) == fetched.end());
  for (uint64_t off : fetched) {
    EXPECT_TRUE(std::any_of(table_->windows.begin() + 1, table_->windows.end(),
                            [&](const SeekWindowRef& w) { return w.offset == off; }))
        << off;
  }
}

TEST_F(WindowedDecodingTest, AWindowThatFailsItsHashFailsTheReadAndServesNothing) {
  ServeWindowed();
  const size_t k = 2;
  remote_.CorruptByte(win_, table_->windows[k].offset + 7);
  const uint64_t at = table_->index.points[k].uncompressed_offset;
  std::string got;
  absl::Status s = decoding_.StreamRange(diff_id_, at, 4096, absl::InfiniteFuture(),
                                         [&](absl::string_view piece) {
                                           got.append(piece.data(), piece.size());
                                           return absl::OkStatus();
                                         });
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kDataLoss,
                          ::testing::HasSubstr(absl::StrCat("window of seek point 2 (",
                                                            "uncompressed offset ", at))));
  EXPECT_TRUE(got.empty());
  EXPECT_THAT(cache_->Read(diff_id_, at, 4096), StatusIs(absl::StatusCode::kDataLoss));
  // Healed, the window is fetched again (a failure is not remembered) and the read served.
  remote_.Heal();
  ASSERT_OK_AND_ASSIGN(std::string ok, cache_->Read(diff_id_, at, 4096));
  EXPECT_TRUE(ok == plain_.substr(at, 4096));
}

TEST_F(WindowedDecodingTest, ConcurrentFirstDecodesOfAPointShareOneWindowFetch) {
  ServeWindowed();
  const size_t k = 4;
  remote_.HoldOnly(win_);
  remote_.Hold();
  std::vector<std::thread> readers;
  std::vector<absl::StatusOr<std::shared_ptr<const std::string>>> got(4, absl::UnknownError(""));
  for (int i = 0; i < 4; ++i) {
    readers.emplace_back([&, i] { got[i] = windows_->Window(k, absl::InfiniteFuture()); });
  }
  ASSERT_TRUE(remote_.WaitForHeld(1));
  while (windows_->stats().hits < 3) absl::SleepFor(absl::Milliseconds(1));
  remote_.Release();
  for (std::thread& t : readers) t.join();
  for (const auto& g : got) {
    ASSERT_THAT(g, IsOk());
    EXPECT_EQ(**g, seek_.points[k].window);
  }
  EXPECT_EQ(WindowFetches().size(), 1u);
  EXPECT_EQ(windows_->stats().fetches, 1u);
}

// A new layer encoding reaches the read path through the codec table alone: the fake "tar+xor"
// codec (tests/oci/fake_codec_test.cc shows the other paths) is served span by span.
TEST_F(DecodingBlobSourceTest, AFakeCodecLayerIsServedThroughItsSeekIndex) {
  ScopedLayerCodecForTest registered(testing::kXorCodec);
  Serve(testing::kXor, testing::XorEncode(plain_, kChunk));
  EXPECT_EQ(seek_.points.size(), 24u);
  EXPECT_EQ(seek_.encoding, testing::kXor);
  ASSERT_OK_AND_ASSIGN(std::string got, cache_->Read(diff_id_, 5 * kChunk + 7, 3 * kChunk));
  EXPECT_TRUE(got == plain_.substr(5 * kChunk + 7, 3 * kChunk));
}

}  // namespace
}  // namespace modelfs
