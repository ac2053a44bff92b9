#include "core/oci/seek_index.h"

#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/oci/span_decoder.h"
#include "core/oci/zstd_frames.h"
#include "testsupport/testing/compress.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::testing::HasSubstr;

// bf16-like bytes: a random mantissa byte and an exponent byte from a narrow range, so they
// compress to about 0.8 as real weights do.
std::string Weights(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>(i % 2 ? 0x3c + rng() % 3 : rng());
  return out;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs a compressor CLI on `data` and returns its output.
std::string Tool(const std::string& command, const std::string& data) {
  testing::TempDir dir;
  const std::string in = dir.WriteFile("in", data).string();
  const std::string out = dir.Join("out").string();
  const std::string cmd = command + " < " + in + " > " + out;
  if (std::system(cmd.c_str()) != 0) ADD_FAILURE() << "failed: " << cmd;
  return ReadAll(out);
}

// Decodes [offset, offset + length) from an index over `compressed` held in memory.
absl::StatusOr<std::string> Range(const SeekIndex& index, const std::string& compressed,
                                  uint64_t offset, uint64_t length,
                                  GzipInflater inflater = GzipInflater::kIsal,
                                  SeekRangeStats* stats = nullptr) {
  std::string out;
  absl::Status s = DecodeSeekRange(
      index, offset, length, "layer test",
      [&](uint64_t off, uint64_t len, const SpanDecoder::Sink& sink) -> absl::Status {
        // Pieces of 5000 bytes, so every decoder state is crossed by a piece boundary.
        for (uint64_t at = off; at < off + len; at += 5000) {
          absl::Status r = sink(
              std::string_view(compressed).substr(at, std::min<uint64_t>(5000, off + len - at)));
          if (!r.ok()) return r;
        }
        return absl::OkStatus();
      },
      [&](std::string_view piece) {
        out.append(piece);
        return absl::OkStatus();
      },
      inflater, stats);
  if (!s.ok()) return s;
  return out;
}

void ExpectRangesMatch(const SeekIndex& index, const std::string& compressed,
                       const std::string& plain) {
  std::mt19937 rng(7);
  std::vector<std::pair<uint64_t, uint64_t>> ranges = {
      {0, 1}, {0, plain.size()}, {plain.size() - 1, 1}, {plain.size() / 2, 100000}};
  for (const SeekPoint& p : index.points) {
    ranges.push_back({p.uncompressed_offset, 1});
    if (p.uncompressed_offset > 0) ranges.push_back({p.uncompressed_offset - 1, 2});
  }
  for (int i = 0; i < 20; ++i) {
    const uint64_t off = rng() % plain.size();
    ranges.push_back({off, std::min<uint64_t>(rng() % 300000, plain.size() - off)});
  }
  for (GzipInflater inflater : {GzipInflater::kIsal, GzipInflater::kZlib}) {
    for (auto [off, len] : ranges) {
      absl::StatusOr<std::string> got = Range(index, compressed, off, len, inflater);
      ASSERT_TRUE(got.ok()) << off << "+" << len << ": " << got.status();
      ASSERT_TRUE(*got == plain.substr(off, len))
          << off << "+" << len << " inflater " << static_cast<int>(inflater);
    }
  }
}

TEST(SeekIndexTest, GzipFromZlibHasCheckpointsAndRoundTrips) {
  const std::string plain = Weights(3 << 20, 1);
  const std::string gz = testing::Gzip(plain);
  std::string decoded;
  ASSERT_OK_AND_ASSIGN(SeekIndex index,
                       BuildSeekIndex(LayerEncoding::kTarGzip, gz, &decoded, 256 << 10));
  EXPECT_EQ(decoded, plain);
  EXPECT_EQ(index.encoding, LayerEncoding::kTarGzip);
  EXPECT_EQ(index.layer_digest, Digest::Of(gz));
  EXPECT_EQ(index.diff_id, Digest::Of(plain));
  EXPECT_EQ(index.compressed_size, gz.size());
  EXPECT_EQ(index.uncompressed_size, plain.size());
  EXPECT_GE(index.points.size(), 8u);
  for (size_t i = 1; i < index.points.size(); ++i) {
    EXPECT_EQ(index.points[i].kind, SeekPoint::Kind::kBlockBoundary);
    EXPECT_EQ(index.points[i].window_size, SeekIndex::kWindowSize);
    ASSERT_OK_AND_ASSIGN(std::string w, InflateSeekWindow(index.points[i]));
    EXPECT_EQ(w, plain.substr(index.points[i].uncompressed_offset - w.size(), w.size()));
  }
  const std::string bytes = SerializeSeekIndex(index);
  ASSERT_OK_AND_ASSIGN(SeekIndex parsed, ParseSeekIndex(bytes));
  EXPECT_EQ(parsed, index);
  EXPECT_EQ(SerializeSeekIndex(parsed), bytes);
}

TEST(SeekIndexTest, GzipRangesAtAnyOffsetEqualThePlainBytes) {
  const std::string plain = Weights(3 << 20, 2);
  const std::string gz = testing::Gzip(plain);
  ASSERT_OK_AND_ASSIGN(SeekIndex index,
                       BuildSeekIndex(LayerEncoding::kTarGzip, gz, nullptr, 200000));
  ExpectRangesMatch(index, gz, plain);
}

TEST(SeekIndexTest, GzipFromTheGzipToolDecodesAtAnyOffset) {
  const std::string plain = Weights(2 << 20, 3);
  const std::string gz = Tool("gzip -6 -c", plain);
  ASSERT_OK_AND_ASSIGN(SeekIndex index,
                       BuildSeekIndex(LayerEncoding::kTarGzip, gz, nullptr, 300000));
  EXPECT_GE(index.points.size(), 4u);
  ExpectRangesMatch(index, gz, plain);
}

TEST(SeekIndexTest, SeveralGzipMembersGetMemberPointsAndRangesCrossThem) {
  const std::string a = Weights(700000, 4), b = Weights(900000, 5), c = Weights(500000, 6);
  const std::string gz = testing::Gzip(a) + testing::Gzip(b) + testing::Gzip(c);
  const std::string plain = a + b + c;
  ASSERT_OK_AND_ASSIGN(SeekIndex index,
                       BuildSeekIndex(LayerEncoding::kTarGzip, gz, nullptr, 250000));
  bool member_point = false;
  for (size_t i = 1; i < index.points.size(); ++i) {
    member_point |= index.points[i].kind == SeekPoint::Kind::kStreamStart;
  }
  EXPECT_TRUE(member_point);
  ExpectRangesMatch(index, gz, plain);
}

// A thinned index (ThinSeekIndex: push and convert bound a model's windows) keeps its first
// point, fits its budget and still serves every range, across the dropped points and gzip
// members; one that fits already is unchanged, and one that cannot fit keeps only the start.
TEST(SeekIndexTest, AThinnedIndexFitsItsBudgetAndServesEveryRange) {
  const std::string a = Weights(700000, 4), b = Weights(900000, 5), c = Weights(500000, 6);
  const std::string gz = testing::Gzip(a) + testing::Gzip(b) + testing::Gzip(c);
  const std::string plain = a + b + c;
  ASSERT_OK_AND_ASSIGN(SeekIndex index,
                       BuildSeekIndex(LayerEncoding::kTarGzip, gz, nullptr, 60000));
  ASSERT_GE(index.points.size(), 20u);
  const uint64_t whole = SerializeSeekIndex(index).size();

  EXPECT_EQ(ThinSeekIndex(index, whole), index);

  const SeekIndex thin = ThinSeekIndex(index, whole / 4);
  EXPECT_LE(SerializeSeekIndex(thin).size(), whole / 4);
  EXPECT_GE(thin.points.size(), 2u);
  EXPECT_LT(thin.points.size(), index.points.size() / 3);
  EXPECT_EQ(thin.points[0], index.points[0]);
  EXPECT_TRUE(thin.lazy());
  ASSERT_OK_AND_ASSIGN(SeekIndex parsed, ParseSeekIndex(SerializeSeekIndex(thin)));
  EXPECT_EQ(parsed, thin);
  ExpectRangesMatch(thin, gz, plain);
  for (const SeekPoint& dropped : index.points) {  // across every point the thin index lost
    if (dropped.uncompressed_offset == 0) continue;
    const uint64_t off = dropped.uncompressed_offset - 1;
    ASSERT_OK_AND_ASSIGN(std::string got, Range(thin, gz, off, 2));
    EXPECT_EQ(got, plain.substr(off, 2)) << off;
  }

  const SeekIndex start_only = ThinSeekIndex(index, 10);
  ASSERT_EQ(start_only.points.size(), 1u);
  EXPECT_FALSE(start_only.lazy());
  ExpectRangesMatch(start_only, gz, plain);
}

// A model's indexes share the budget by compressed size: the larger layer keeps more.
TEST(SeekIndexTest, AModelsIndexesShareTheBudgetByCompressedSize) {
  const std::string small = testing::Gzip(Weights(1 << 20, 8));
  const std::string large = testing::Gzip(Weights(3 << 20, 9));
  ASSERT_OK_AND_ASSIGN(SeekIndex s, BuildSeekIndex(LayerEncoding::kTarGzip, small, nullptr, 16384));
  ASSERT_OK_AND_ASSIGN(SeekIndex l, BuildSeekIndex(LayerEncoding::kTarGzip, large, nullptr, 16384));
  const uint64_t whole = SerializeSeekIndex(s).size() + SerializeSeekIndex(l).size();
  std::vector<SeekIndex> v = {s, l};
  ThinSeekIndexes(v, whole);  // fits: unchanged
  EXPECT_EQ(v[0], s);
  EXPECT_EQ(v[1], l);
  const uint64_t budget = 1 << 20;  // over 64 KiB a share, under the whole
  ASSERT_GT(whole, budget);
  ThinSeekIndexes(v, budget);
  const uint64_t bs = SerializeSeekIndex(v[0]).size(), bl = SerializeSeekIndex(v[1]).size();
  EXPECT_LE(bs + bl, budget);
  EXPECT_LE(bs, budget * small.size() / (small.size() + large.size()));
  EXPECT_GT(bl, bs);
}

TEST(SeekIndexTest, ZstdFramesFromPushGetOnePointPerFrame) {
  const std::string plain = Weights((3 << 20) + 12345, 7);
  testing::TempDir dir;
  const std::string in = dir.WriteFile("in.tar", plain).string();
  const std::string out = dir.Join("out.tar.zst").string();
  ASSERT_OK_AND_ASSIGN(ZstdFramesResult r, WriteZstdFrames(in, out, 1 << 20));
  const std::string zst = ReadAll(out);
  ASSERT_OK_AND_ASSIGN(SeekIndex index, BuildSeekIndex(LayerEncoding::kTarZstd, zst));
  EXPECT_EQ(index.points.size(), r.frames);
  EXPECT_EQ(index.points.size(), 4u);
  for (size_t i = 0; i < index.points.size(); ++i) {
    EXPECT_EQ(index.points[i].uncompressed_offset, i << 20);
  }
  EXPECT_EQ(index.layer_digest, r.digest);
  EXPECT_EQ(index.diff_id, r.diff_id);
  EXPECT_TRUE(index.lazy());
  ASSERT_OK_AND_ASSIGN(SeekIndex parsed, ParseSeekIndex(SerializeSeekIndex(index)));
  EXPECT_EQ(parsed, index);
  ExpectRangesMatch(index, zst, plain);
}

// zstd:chunked (buildah, podman) ends its stream with skippable frames holding its table of
// contents: they add no bytes, so they get no point (one at the end would cover nothing, and a
// reader refuses it), and every range still decodes.
TEST(SeekIndexTest, TrailingSkippableFramesGetNoPoint) {
  const std::string plain = Weights((2 << 20) + 777, 9);
  testing::TempDir dir;
  const std::string in = dir.WriteFile("in.tar", plain).string();
  const std::string out = dir.Join("out.tar.zst").string();
  ASSERT_OK_AND_ASSIGN(ZstdFramesResult r, WriteZstdFrames(in, out, 1 << 20));
  std::string zst = ReadAll(out);
  // A skippable frame: magic 0x184D2A50 (little-endian), a 4-byte size, then that many bytes.
  const std::string toc = "table of contents";
  const uint32_t n = toc.size();
  zst += std::string("\x50\x2A\x4D\x18", 4);
  zst += std::string({static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff),
                      static_cast<char>((n >> 16) & 0xff), static_cast<char>(n >> 24)});
  zst += toc;
  ASSERT_OK_AND_ASSIGN(SeekIndex index, BuildSeekIndex(LayerEncoding::kTarZstd, zst));
  EXPECT_EQ(index.points.size(), r.frames);
  EXPECT_EQ(index.uncompressed_size, plain.size());
  EXPECT_EQ(index.compressed_size, zst.size());
  ASSERT_OK_AND_ASSIGN(SeekIndex parsed, ParseSeekIndex(SerializeSeekIndex(index)));
  EXPECT_EQ(parsed, index);
  ExpectRangesMatch(index, zst, plain);
}

TEST(SeekIndexTest, ZstdFromTheZstdToolIsOneFrameAndSoNotLazy) {
  const std::string plain = Weights(2 << 20, 8);
  const std::string zst = Tool("zstd -q -3 -c", plain);
  ASSERT_OK_AND_ASSIGN(SeekIndex index, BuildSeekIndex(LayerEncoding::kTarZstd, zst));
  EXPECT_EQ(index.points.size(), 1u);
  EXPECT_FALSE(index.lazy());
  ExpectRangesMatch(index, zst, plain);
}

TEST(SeekIndexTest, ARangeFetchesOnlyTheCompressedBytesUpToTheNextPoint) {
  const std::string plain = Weights(8 << 20, 9);
  const std::string zst = testing::ZstdFrames(plain, 1 << 20);
  ASSERT_OK_AND_ASSIGN(SeekIndex index, BuildSeekIndex(LayerEncoding::kTarZstd, zst));
  SeekRangeStats stats;
  ASSERT_OK_AND_ASSIGN(std::string got,
                       Range(index, zst, (3 << 20) + 10, 1 << 20, GzipInflater::kIsal, &stats));
  EXPECT_EQ(got, plain.substr((3 << 20) + 10, 1 << 20));
  // Frames 3 and 4, and not past them (the fetch stops once the range is decoded).
  EXPECT_GT(stats.compressed_bytes,
            index.points[4].compressed_offset - index.points[3].compressed_offset);
  EXPECT_LE(stats.compressed_bytes,
            index.points[5].compressed_offset - index.points[3].compressed_offset);
  EXPECT_EQ(stats.lead_in, 10u);
}

TEST(SeekIndexTest, CorruptGzipBytesAreDataLoss) {
  const std::string plain = Weights(1 << 20, 10);
  std::string gz = testing::Gzip(plain);
  gz[gz.size() / 2] ^= 0x55;
  gz[gz.size() / 2 + 1] ^= 0x55;
  EXPECT_THAT(BuildSeekIndex(LayerEncoding::kTarGzip, gz).status(),
              StatusIs(absl::StatusCode::kDataLoss));
}

TEST(SeekIndexTest, ATruncatedStreamIsDataLossAndARangePastItsEndToo) {
  const std::string plain = Weights(1 << 20, 11);
  const std::string gz = testing::Gzip(plain);
  EXPECT_THAT(BuildSeekIndex(LayerEncoding::kTarGzip, gz.substr(0, gz.size() - 100)).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("ends inside a member")));
  const std::string zst = testing::ZstdFrames(plain, 1 << 18);
  EXPECT_THAT(BuildSeekIndex(LayerEncoding::kTarZstd, zst.substr(0, zst.size() - 100)).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("ends inside a frame")));
  // An index of the whole stream used on a truncated one: the range cannot be produced.
  ASSERT_OK_AND_ASSIGN(SeekIndex index, BuildSeekIndex(LayerEncoding::kTarZstd, zst));
  const std::string cut = zst.substr(0, zst.size() - 100);
  index.compressed_size = cut.size();
  EXPECT_THAT(Range(index, cut, plain.size() - 10, 10).status(),
              StatusIs(absl::StatusCode::kDataLoss));
}

class SeekIndexParseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    plain_ = Weights(2 << 20, 12);
    gz_ = testing::Gzip(plain_);
    auto index = BuildSeekIndex(LayerEncoding::kTarGzip, gz_, nullptr, 500000);
    ASSERT_TRUE(index.ok());
    index_ = *index;
    ASSERT_GE(index_.points.size(), 3u);
  }
  absl::Status Parse(const SeekIndex& i) { return ParseSeekIndex(SerializeSeekIndex(i)).status(); }
  std::string plain_, gz_;
  SeekIndex index_;
};

TEST_F(SeekIndexParseTest, RefusesBadMagicVersionAndTruncation) {
  std::string b = SerializeSeekIndex(index_);
  std::string bad = b;
  bad[0] = 'X';
  EXPECT_THAT(ParseSeekIndex(bad).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  bad = b;
  bad[8] = 2;
  EXPECT_THAT(ParseSeekIndex(bad).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("version")));
  for (size_t n : {size_t{5}, size_t{50}, b.size() - 1}) {
    EXPECT_THAT(ParseSeekIndex(b.substr(0, n)).status(), StatusIs(absl::StatusCode::kOutOfRange))
        << n;
  }
  EXPECT_THAT(ParseSeekIndex(b + "x").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("trailing")));
}

TEST_F(SeekIndexParseTest, RefusesAHugeCountBeforeAllocating) {
  std::string b = SerializeSeekIndex(index_);
  for (int i = 0; i < 8; ++i) b[96 + i] = static_cast<char>(0xff);
  EXPECT_THAT(ParseSeekIndex(b).status(),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("points need")));
}

TEST_F(SeekIndexParseTest, RefusesOffsetsThatDoNotIncreaseOrLeaveTheLayer) {
  SeekIndex i = index_;
  i.points[2].uncompressed_offset = i.points[1].uncompressed_offset;
  EXPECT_THAT(Parse(i), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("increase")));
  i = index_;
  i.points[2].compressed_offset = i.points[1].compressed_offset - 1;
  EXPECT_THAT(Parse(i), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("increase")));
  i = index_;
  i.points.back().compressed_offset = i.compressed_size;
  EXPECT_THAT(Parse(i), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("past the end")));
  i = index_;
  i.points[0].compressed_offset = 1;
  EXPECT_THAT(Parse(i), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("first point")));
}

TEST_F(SeekIndexParseTest, RefusesMalformedWindowsAndBits) {
  SeekIndex i = index_;
  i.points[1].bits = 8;
  EXPECT_THAT(Parse(i), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bits")));
  i = index_;
  i.points[1].window_size = SeekIndex::kWindowSize + 1;
  EXPECT_THAT(Parse(i), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("window_size")));
  i = index_;
  i.encoding = LayerEncoding::kTarZstd;  // zstd has no block boundaries
  EXPECT_THAT(Parse(i), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("kind 1")));
}

// Windows are inflated where a decode starts at their point, not when the index is parsed: a
// window that is not raw deflate of exactly window_size bytes parses, and every decode that
// starts at its point fails naming the window.
TEST_F(SeekIndexParseTest, AMalformedWindowFailsTheDecodeThatStartsAtIt) {
  for (int variant = 0; variant < 2; ++variant) {
    SeekIndex i = index_;
    if (variant == 0) {
      i.points[1].window_size -= 1;  // the stored window inflates to more
    } else {
      i.points[1].window[3] ^= 0x40;
    }
    ASSERT_OK_AND_ASSIGN(SeekIndex parsed, ParseSeekIndex(SerializeSeekIndex(i)));
    const uint64_t off = parsed.points[1].uncompressed_offset;
    absl::StatusOr<std::string> got = Range(parsed, gz_, off, 1000);
    EXPECT_THAT(got.status(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("window")))
        << variant;
    // A decode that starts at another point is not affected.
    const uint64_t off2 = parsed.points[2].uncompressed_offset;
    ASSERT_OK_AND_ASSIGN(std::string ok, Range(parsed, gz_, off2, 1000));
    EXPECT_EQ(ok, plain_.substr(off2, 1000));
  }
}

// A lying index decodes wrong bytes or fails; it never decodes right bytes for the wrong
// offset silently: the caller's chunk hashes catch what comes out (tests/cache).
TEST_F(SeekIndexParseTest, AWrongUncompressedOffsetGivesOtherBytes) {
  SeekIndex i = index_;
  i.points[1].uncompressed_offset += 4096;
  const uint64_t off = i.points[1].uncompressed_offset;
  absl::StatusOr<std::string> got = Range(i, gz_, off, 1000);
  ASSERT_TRUE(got.ok());
  EXPECT_NE(*got, plain_.substr(off, 1000));
}

}  // namespace
}  // namespace modelfs
