// The seek windows file (core/oci/seek_windows.h): the table round-trips, the windows lie
// where the table says, the parser refuses what docs/seek-index.md says it refuses, and a
// window that is not the table's fails its check with kDataLoss naming the point.
#include "core/oci/seek_windows.h"

#include <random>
#include <string>

#include "core/oci/span_decoder.h"
#include "testsupport/testing/compress.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::IsOk;
using ::modelfs::testing::StatusIs;
using ::testing::HasSubstr;

std::string Weights(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>(i % 2 ? 0x3c + rng() % 3 : rng());
  return out;
}

class SeekWindowsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    plain_ = Weights(6 << 20, 44);
    gz_ = testing::Gzip(plain_);
    absl::StatusOr<SeekIndex> built =
        BuildSeekIndex(LayerEncoding::kTarGzip, gz_, nullptr, 1 << 20);
    ASSERT_THAT(built, IsOk());
    seek_ = *built;
    ASSERT_GE(seek_.points.size(), 5u);
    file_ = SerializeSeekWindows(seek_);
  }
  // Sets the little-endian field of `n` bytes at `at` in `bytes`.
  static void Put(std::string& bytes, size_t at, uint64_t v, size_t n) {
    for (size_t i = 0; i < n; ++i) bytes[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
  }
  static size_t Entry(size_t i) {
    return SeekWindowsTable::kHeaderSize + SeekWindowsTable::kEntrySize * i;
  }

  std::string plain_, gz_, file_;
  SeekIndex seek_;
};

TEST_F(SeekWindowsTest, TheTableHoldsEveryPointAndTheWindowsLieWhereItSays) {
  ASSERT_OK_AND_ASSIGN(SeekWindowsTable t, ParseSeekWindowsTable(file_));
  ASSERT_EQ(t.index.points.size(), seek_.points.size());
  EXPECT_EQ(t.table_size(),
            SeekWindowsTable::kHeaderSize + SeekWindowsTable::kEntrySize * seek_.points.size());
  EXPECT_EQ(t.file_size(), file_.size());
  EXPECT_EQ(t.index.layer_digest, seek_.layer_digest);
  EXPECT_EQ(t.index.diff_id, seek_.diff_id);
  EXPECT_EQ(t.index.compressed_size, seek_.compressed_size);
  EXPECT_EQ(t.index.uncompressed_size, seek_.uncompressed_size);
  size_t checked = 0;
  for (size_t i = 0; i < seek_.points.size(); ++i) {
    const SeekPoint& want = seek_.points[i];
    const SeekPoint& got = t.index.points[i];
    EXPECT_EQ(got.uncompressed_offset, want.uncompressed_offset) << i;
    EXPECT_EQ(got.compressed_offset, want.compressed_offset) << i;
    EXPECT_EQ(got.kind, want.kind) << i;
    EXPECT_EQ(got.bits, want.bits) << i;
    EXPECT_EQ(got.window_size, want.window_size) << i;
    EXPECT_TRUE(got.window.empty()) << i;
    const SeekWindowRef& w = t.windows[i];
    EXPECT_EQ(file_.substr(w.offset, w.length), want.window) << i;
    if (w.length > 0) {
      ++checked;
      EXPECT_OK(CheckSeekWindow(t, i, want.window, "layer"));
    }
  }
  EXPECT_GT(checked, 0u) << "no point with a window: the layer is too small to test this";
  // The table alone parses the same, and serializes to the file's first bytes.
  ASSERT_OK_AND_ASSIGN(SeekWindowsTable alone,
                       ParseSeekWindowsTable(std::string_view(file_).substr(0, t.table_size())));
  EXPECT_EQ(alone, t);
  EXPECT_EQ(SerializeSeekWindowsTable(t), file_.substr(0, t.table_size()));
}

TEST_F(SeekWindowsTest, ARangeDecodesFromAFetchedWindowAsFromAnInlineOne) {
  ASSERT_OK_AND_ASSIGN(SeekWindowsTable t, ParseSeekWindowsTable(file_));
  const size_t k = 3;
  ASSERT_EQ(t.index.points[k].kind, SeekPoint::Kind::kBlockBoundary);
  const uint64_t off = t.index.points[k].uncompressed_offset + 100;
  std::string got;
  ASSERT_OK(DecodeSeekRange(
      t.index, off, 300000, "layer",
      [&](uint64_t o, uint64_t l, const SpanDecoder::Sink& sink) {
        return sink(std::string_view(gz_).substr(o, l));
      },
      [&](std::string_view piece) {
        got.append(piece);
        return absl::OkStatus();
      },
      GzipInflater::kIsal, nullptr, file_.substr(t.windows[k].offset, t.windows[k].length)));
  EXPECT_EQ(got, plain_.substr(off, 300000));
}

TEST_F(SeekWindowsTest, AWindowThatIsNotTheTablesIsDataLossNamingThePointAndItsOffset) {
  ASSERT_OK_AND_ASSIGN(SeekWindowsTable t, ParseSeekWindowsTable(file_));
  std::string bad = seek_.points[2].window;
  bad[10] ^= 1;
  EXPECT_THAT(CheckSeekWindow(t, 2, bad, "layer sha256:x"),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr(absl::StrCat("layer sha256:x: the window of seek point 2 (",
                                              "uncompressed offset ",
                                              seek_.points[2].uncompressed_offset))));
  EXPECT_THAT(CheckSeekWindow(t, 2, bad.substr(1), "layer"),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr(absl::StrCat("at offset ", t.windows[2].offset))));
  EXPECT_THAT(CheckSeekWindow(t, 0, "", "layer"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(SeekWindowsTest, RefusesABadMagicVersionOrEncoding) {
  std::string b = file_;
  b[0] = 'X';
  EXPECT_THAT(ParseSeekWindowsTable(b), StatusIs(absl::StatusCode::kInvalidArgument));
  b = file_;
  Put(b, 8, 2, 4);
  EXPECT_THAT(ParseSeekWindowsTable(b),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("version is 2")));
  b = file_;
  Put(b, 12, 2, 4);  // zstd: frames need no window
  EXPECT_THAT(ParseSeekWindowsTable(b),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not 1 (gzip)")));
}

TEST_F(SeekWindowsTest, RefusesACountTheBytesCannotHoldBeforeAllocating) {
  std::string b = file_.substr(0, Entry(2));
  EXPECT_THAT(ParseSeekWindowsTable(b), StatusIs(absl::StatusCode::kOutOfRange));
  b = file_;
  Put(b, 96, uint64_t{1} << 60, 8);
  EXPECT_THAT(ParseSeekWindowsTable(b), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(ParseSeekWindowsTable(file_.substr(0, 50)), StatusIs(absl::StatusCode::kOutOfRange));
}

TEST_F(SeekWindowsTest, RefusesATableSizeThatIsNotTheEntries) {
  std::string b = file_;
  Put(b, 104, Entry(seek_.points.size()) + 1, 8);
  EXPECT_THAT(ParseSeekWindowsTable(b),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("table size")));
}

TEST_F(SeekWindowsTest, RefusesWindowsThatDoNotFollowOneAnother) {
  std::string b = file_;
  const size_t e = Entry(2);
  Put(b, e + 24, ParseSeekWindowsTable(file_)->windows[2].offset + 1, 8);
  EXPECT_THAT(ParseSeekWindowsTable(b),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("point 2")));
}

TEST_F(SeekWindowsTest, RefusesABlockBoundaryWithoutAWindowAndAStreamStartWithAHash) {
  std::string b = file_;
  Put(b, Entry(1) + 32, 0, 4);
  EXPECT_THAT(ParseSeekWindowsTable(b),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("has no window")));
  b = file_;
  b[Entry(0) + 40] = 1;
  EXPECT_THAT(ParseSeekWindowsTable(b),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no window but a hash")));
}

TEST_F(SeekWindowsTest, RefusesWhatTheSeekIndexRefuses) {
  std::string b = file_;
  Put(b, Entry(2), seek_.points[1].uncompressed_offset, 8);  // offsets must increase
  EXPECT_THAT(ParseSeekWindowsTable(b),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("do not increase")));
  b = file_;
  Put(b, Entry(1) + 17, 8, 1);  // bits
  EXPECT_THAT(ParseSeekWindowsTable(b), StatusIs(absl::StatusCode::kInvalidArgument));
  b = file_;
  Put(b, Entry(1) + 36, 1, 4);  // reserved
  EXPECT_THAT(ParseSeekWindowsTable(b),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("reserved")));
}

}  // namespace
}  // namespace modelfs
