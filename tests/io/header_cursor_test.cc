// HeaderCursor: bounds checks, little-endian decoding, and how many reads it costs.
#include "core/io/header_cursor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "core/io/range_reader.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

constexpr uint64_t KiB = 1024;
constexpr uint64_t MiB = 1024 * KiB;

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + 7) % 251);
  return s;
}

// Serves bytes from memory and records every (offset, length) the cursor asks for.
class RecordingReader final : public RangeReader {
 public:
  RecordingReader(std::string name, std::string bytes)
      : inner_(MakeMemoryRangeReader(std::move(name), std::move(bytes))) {}
  const std::string& name() const override { return inner_->name(); }
  absl::StatusOr<uint64_t> Size() override { return inner_->Size(); }
  absl::StatusOr<std::string> ReadAt(uint64_t offset, uint64_t length) override {
    reads.emplace_back(offset, length);
    return inner_->ReadAt(offset, length);
  }
  RangeReadStats stats() const override { return inner_->stats(); }

  std::vector<std::pair<uint64_t, uint64_t>> reads;

 private:
  std::unique_ptr<RangeReader> inner_;
};

TEST(HeaderCursorTest, DecodesLittleEndianIntegers) {
  std::string bytes = {'\x01', '\x02', '\x03', '\x04', '\x05', '\x06', '\x07', '\x08',
                       '\x09', '\x0a', '\x0b', '\x0c', '\x0d', '\x0e', '\xff'};
  RecordingReader reader("le", bytes);
  HeaderCursor c(reader, bytes.size());
  EXPECT_EQ(*c.ReadU64(), 0x0807060504030201u);
  EXPECT_EQ(*c.ReadU32(), 0x0c0b0a09u);
  EXPECT_EQ(*c.ReadU16(), 0x0e0du);
  EXPECT_EQ(*c.ReadU8(), 0xffu);
  EXPECT_EQ(c.remaining(), 0u);
}

TEST(HeaderCursorTest, ASmallHeaderCostsOneReadOfTheWholeSmallFile) {
  const std::string bytes = Pattern(40 * KiB);
  RecordingReader reader("small", bytes);
  HeaderCursor c(reader, bytes.size());
  ASSERT_OK_AND_ASSIGN(uint64_t n, c.ReadU64());
  (void)n;
  ASSERT_OK_AND_ASSIGN(std::string_view rest, c.Read(40 * KiB - 8));
  EXPECT_EQ(rest, std::string_view(bytes).substr(8));
  EXPECT_THAT(reader.reads, ElementsAre(Pair(0u, 40 * KiB)));
}

TEST(HeaderCursorTest, ChunksDoubleFrom64KiBUpTo8MiB) {
  const uint64_t total = 24 * MiB;
  RecordingReader reader("big", std::string(total, 'z'));
  HeaderCursor c(reader, total);
  // Read one byte, then skip to the end of the buffered chunk, so each read refills exactly
  // one chunk and the reads list shows the chunk sizes.
  uint64_t end = 0;
  while (c.remaining() > 0) {
    ASSERT_OK_AND_ASSIGN(std::string_view b, c.Read(1));
    ASSERT_EQ(b, "z");
    end = reader.reads.back().first + reader.reads.back().second;
    ASSERT_OK(c.Skip(end - c.position()));
  }
  std::vector<std::pair<uint64_t, uint64_t>> want;
  uint64_t pos = 0, chunk = 64 * KiB;
  while (pos < total) {
    uint64_t len = std::min(chunk, total - pos);
    want.emplace_back(pos, len);
    pos += len;
    chunk = std::min(chunk * 2, 8 * MiB);
  }
  // 64K 128K 256K 512K 1M 2M 4M 8M, then 8M again (the cap), then the last 64K.
  ASSERT_EQ(want.size(), 10u);
  EXPECT_EQ(want[8], std::make_pair(16 * MiB - 64 * KiB, 8 * MiB));
  EXPECT_EQ(reader.reads, want);
  EXPECT_EQ(reader.stats().requests, 10u);
  EXPECT_EQ(reader.stats().bytes, total);
}

TEST(HeaderCursorTest, AReadSpanningTheBufferEndRefetchesFromTheReadStart) {
  const std::string bytes = Pattern(200 * KiB);
  RecordingReader reader("span", bytes);
  HeaderCursor c(reader, bytes.size());
  ASSERT_OK(c.Seek(64 * KiB - 3));
  ASSERT_OK(c.Read(1).status());  // buffers [64K-3, 128K-3)
  ASSERT_OK(c.Seek(128 * KiB - 5));
  ASSERT_OK_AND_ASSIGN(std::string_view b, c.Read(10));  // 2 bytes buffered, 8 not
  EXPECT_EQ(b, std::string_view(bytes).substr(128 * KiB - 5, 10));
  EXPECT_THAT(reader.reads,
              ElementsAre(Pair(64 * KiB - 3, 64 * KiB), Pair(128 * KiB - 5, 72 * KiB + 5)));
}

TEST(HeaderCursorTest, AReadLargerThanTheChunkFetchesItWhole) {
  const std::string bytes = Pattern(1 * MiB);
  RecordingReader reader("large", bytes);
  HeaderCursor c(reader, bytes.size());
  ASSERT_OK_AND_ASSIGN(std::string_view b, c.Read(300 * KiB));
  EXPECT_EQ(b, std::string_view(bytes).substr(0, 300 * KiB));
  EXPECT_THAT(reader.reads, ElementsAre(Pair(0u, 300 * KiB)));
}

TEST(HeaderCursorTest, SeekingBackInsideTheBufferCostsNoRead) {
  const std::string bytes = Pattern(1000);
  RecordingReader reader("back", bytes);
  HeaderCursor c(reader, bytes.size());
  ASSERT_OK(c.Read(500).status());
  ASSERT_OK(c.Seek(100));
  ASSERT_OK_AND_ASSIGN(std::string_view b, c.Read(4));
  EXPECT_EQ(b, std::string_view(bytes).substr(100, 4));
  EXPECT_EQ(reader.reads.size(), 1u);
}

TEST(HeaderCursorTest, ACorruptLengthIsTruncationBeforeAnyRead) {
  RecordingReader reader("model.gguf", Pattern(100));
  HeaderCursor c(reader, 100);
  ASSERT_OK(c.Skip(90));
  EXPECT_THAT(c.Read(uint64_t{1} << 62),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("model.gguf: truncated or corrupt: wants 4611686018427387904 "
                                 "bytes at byte 90 but only 10 remain")));
  EXPECT_TRUE(reader.reads.empty());
}

TEST(HeaderCursorTest, ReadingAnIntegerPastTheEndIsTruncation) {
  RecordingReader reader("short", "abc");
  HeaderCursor c(reader, 3);
  EXPECT_THAT(c.ReadU32(), StatusIs(absl::StatusCode::kOutOfRange,
                                    HasSubstr("wants 4 bytes at byte 0 but only 3 remain")));
}

TEST(HeaderCursorTest, SkipPastTheEndIsTruncation) {
  RecordingReader reader("short", "abc");
  HeaderCursor c(reader, 3);
  EXPECT_THAT(c.Skip(4), StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("only 3 remain")));
  EXPECT_EQ(c.position(), 0u);
}

TEST(HeaderCursorTest, SeekPastTheEndIsOutOfRange) {
  RecordingReader reader("short", "abc");
  HeaderCursor c(reader, 3);
  EXPECT_THAT(c.Seek(4), StatusIs(absl::StatusCode::kOutOfRange,
                                  HasSubstr("short: seek to byte 4 past the end (3)")));
}

TEST(HeaderCursorTest, StartsAtTheGivenOffset) {
  const std::string bytes = Pattern(100);
  RecordingReader reader("start", bytes);
  HeaderCursor c(reader, bytes.size(), 60);
  ASSERT_OK_AND_ASSIGN(std::string_view b, c.Read(40));
  EXPECT_EQ(b, std::string_view(bytes).substr(60));
  EXPECT_THAT(reader.reads, ElementsAre(Pair(60u, 40u)));
}

TEST(HeaderCursorTest, ASourceShorterThanItsDeclaredSizeSurfacesTheReaderError) {
  RecordingReader reader("liar", "abc");
  HeaderCursor c(reader, 10);  // the caller believed a stale size
  EXPECT_THAT(c.Read(5), StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("liar: truncated")));
}

}  // namespace
}  // namespace modelfs
