// FileRangeReader, MemoryRangeReader and OpenRangeReader's dispatch.
#include "core/io/range_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::modelfs::testing::TempDir;
using ::testing::HasSubstr;

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + 7) % 251);
  return s;
}

TEST(FileRangeReaderTest, ReportsTheFileSize) {
  TempDir dir;
  auto path = dir.WriteFile("blob", Pattern(12345));
  ASSERT_OK_AND_ASSIGN(auto reader, OpenFileRangeReader(path.string()));
  ASSERT_OK_AND_ASSIGN(uint64_t size, reader->Size());
  EXPECT_EQ(size, 12345u);
  EXPECT_EQ(reader->name(), path.string());
}

TEST(FileRangeReaderTest, ReturnsTheBytesAtAnOffset) {
  TempDir dir;
  const std::string bytes = Pattern(10000);
  ASSERT_OK_AND_ASSIGN(auto reader, OpenFileRangeReader(dir.WriteFile("blob", bytes).string()));
  ASSERT_OK_AND_ASSIGN(std::string got, reader->ReadAt(4321, 1000));
  EXPECT_EQ(got, bytes.substr(4321, 1000));
}

TEST(FileRangeReaderTest, ReadsUpToTheLastByte) {
  TempDir dir;
  const std::string bytes = Pattern(100);
  ASSERT_OK_AND_ASSIGN(auto reader, OpenFileRangeReader(dir.WriteFile("blob", bytes).string()));
  ASSERT_OK_AND_ASSIGN(std::string got, reader->ReadAt(90, 10));
  EXPECT_EQ(got, bytes.substr(90));
}

TEST(FileRangeReaderTest, ReadPastTheEndIsOutOfRangeNamingOffsetAndSize) {
  TempDir dir;
  auto path = dir.WriteFile("blob", Pattern(100));
  ASSERT_OK_AND_ASSIGN(auto reader, OpenFileRangeReader(path.string()));
  EXPECT_THAT(reader->ReadAt(95, 10),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr(path.string() +
                                 ": truncated: wants 10 bytes at byte 95 but the source has 100")));
}

TEST(FileRangeReaderTest, HugeLengthDoesNotOverflowTheBoundsCheck) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto reader,
                       OpenFileRangeReader(dir.WriteFile("blob", Pattern(100)).string()));
  EXPECT_THAT(reader->ReadAt(50, UINT64_MAX),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("truncated")));
}

TEST(FileRangeReaderTest, CountsRequestsAndBytes) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto reader,
                       OpenFileRangeReader(dir.WriteFile("blob", Pattern(1000)).string()));
  ASSERT_OK(reader->ReadAt(0, 10).status());
  ASSERT_OK(reader->ReadAt(500, 300).status());
  EXPECT_EQ(reader->stats().requests, 2u);
  EXPECT_EQ(reader->stats().bytes, 310u);
}

TEST(FileRangeReaderTest, MissingFileIsNotFound) {
  TempDir dir;
  std::string path = dir.Join("absent").string();
  EXPECT_THAT(OpenFileRangeReader(path), StatusIs(absl::StatusCode::kNotFound, HasSubstr(path)));
}

TEST(FileRangeReaderTest, DirectoryIsInvalidArgument) {
  TempDir dir;
  EXPECT_THAT(OpenFileRangeReader(dir.path().string()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a regular file")));
}

TEST(MemoryRangeReaderTest, ReturnsTheBytesAtAnOffset) {
  auto reader = MakeMemoryRangeReader("mem", "hello, world");
  ASSERT_OK_AND_ASSIGN(std::string got, reader->ReadAt(7, 5));
  EXPECT_EQ(got, "world");
  ASSERT_OK_AND_ASSIGN(uint64_t size, reader->Size());
  EXPECT_EQ(size, 12u);
  EXPECT_EQ(reader->name(), "mem");
}

TEST(MemoryRangeReaderTest, EmptyReadAtTheEndSucceeds) {
  auto reader = MakeMemoryRangeReader("mem", "abc");
  ASSERT_OK_AND_ASSIGN(std::string got, reader->ReadAt(3, 0));
  EXPECT_EQ(got, "");
}

TEST(MemoryRangeReaderTest, ReadPastTheEndIsOutOfRange) {
  auto reader = MakeMemoryRangeReader("mem", "abc");
  EXPECT_THAT(reader->ReadAt(2, 2),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("mem: truncated: wants 2 bytes at byte 2 but the source has 3")));
}

TEST(MemoryRangeReaderTest, CountsRequestsAndBytes) {
  auto reader = MakeMemoryRangeReader("mem", Pattern(100));
  ASSERT_OK(reader->ReadAt(0, 40).status());
  ASSERT_OK(reader->ReadAt(40, 2).status());
  EXPECT_EQ(reader->stats().requests, 2u);
  EXPECT_EQ(reader->stats().bytes, 42u);
}

TEST(OpenRangeReaderTest, RecognisesHttpAndHttpsUrlsCaseInsensitively) {
  EXPECT_TRUE(IsHttpUrl("http://example.com/x"));
  EXPECT_TRUE(IsHttpUrl("HTTPS://example.com/x"));
  EXPECT_FALSE(IsHttpUrl("/tmp/http://x"));
  EXPECT_FALSE(IsHttpUrl("ftp://example.com/x"));
}

TEST(OpenRangeReaderTest, OpensAPlainPathAsAFile) {
  TempDir dir;
  auto path = dir.WriteFile("blob", "xyz");
  ASSERT_OK_AND_ASSIGN(auto reader, OpenRangeReader(path.string()));
  ASSERT_OK_AND_ASSIGN(std::string got, reader->ReadAt(0, 3));
  EXPECT_EQ(got, "xyz");
}

}  // namespace
}  // namespace modelfs
