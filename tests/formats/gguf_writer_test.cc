// GgufWriter: determinism, layout, sparse files, and the checks on what it is asked to write.
#include "core/formats/gguf_writer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <string>

#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::modelfs::testing::TempDir;
using ::testing::HasSubstr;

constexpr uint32_t kF32 = 0, kQ8_0 = 8, kQ4_K = 12;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

GgufWriter SmallWriter() {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetUint32("llama.block_count", 2);
  EXPECT_OK(w.AddTensor("a", {3}, kF32, std::string(12, '\x11')));
  EXPECT_OK(w.AddTensor("b", {32}, kQ8_0, std::string(34, '\x22')));
  return w;
}

TEST(GgufWriterTest, HeaderBytesAreExact) {
  GgufWriter w;
  w.SetUint8("k", 7);
  ASSERT_OK_AND_ASSIGN(std::string bytes, w.Serialize());
  const std::string expected = std::string("GGUF\3\0\0\0", 8) + std::string(8, '\0') +
                               std::string("\1\0\0\0\0\0\0\0", 8) +
                               std::string("\1\0\0\0\0\0\0\0k\0\0\0\0\7", 14);
  // 38 bytes of header padded with zeros to 64.
  EXPECT_EQ(bytes, expected + std::string(64 - expected.size(), '\0'));
}

TEST(GgufWriterTest, SerializeIsDeterministic) {
  ASSERT_OK_AND_ASSIGN(std::string a, SmallWriter().Serialize());
  ASSERT_OK_AND_ASSIGN(std::string b, SmallWriter().Serialize());
  EXPECT_EQ(a, b);
}

TEST(GgufWriterTest, WriteFileProducesTheSerializedBytes) {
  TempDir dir;
  const std::string path = dir.Join("m.gguf");
  GgufWriter w = SmallWriter();
  ASSERT_OK(w.WriteFile(path));
  ASSERT_OK_AND_ASSIGN(std::string bytes, w.Serialize());
  EXPECT_EQ(ReadAll(path), bytes);
}

TEST(GgufWriterTest, TensorDataIsPaddedWithZerosToTheAlignment) {
  GgufWriter w = SmallWriter();
  ASSERT_OK_AND_ASSIGN(std::string bytes, w.Serialize());
  ASSERT_OK_AND_ASSIGN(uint64_t header, w.HeaderSize());
  EXPECT_EQ(bytes.substr(header, 12), std::string(12, '\x11'));
  EXPECT_EQ(bytes.substr(header + 12, 20), std::string(20, '\0'));
  EXPECT_EQ(bytes.substr(header + 32, 34), std::string(34, '\x22'));
  EXPECT_EQ(bytes.size(), header + 32 + 64);
}

TEST(GgufWriterTest, SparseTensorsBecomeHoles) {
  TempDir dir;
  const std::string path = dir.Join("sparse.gguf");
  GgufWriter w;
  ASSERT_OK(w.AddSparseTensor("big", {4096, 4096}, kQ8_0));  // 17,825,792 bytes
  ASSERT_OK(w.WriteFile(path));
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  ASSERT_OK_AND_ASSIGN(uint64_t size, w.FileSize());
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), size);
  EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, 1u << 20);
}

TEST(GgufWriterTest, GeneratedTensorsAreProducedAtWriteTime) {
  int calls = 0;
  GgufWriter w;
  ASSERT_OK(w.AddGeneratedTensor("g", {4}, kF32, [&calls]() -> absl::StatusOr<std::string> {
    ++calls;
    return std::string(16, '\x7f');
  }));
  EXPECT_EQ(calls, 0);
  ASSERT_OK_AND_ASSIGN(std::string bytes, w.Serialize());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(bytes.substr(bytes.size() - 32, 16), std::string(16, '\x7f'));
}

TEST(GgufWriterTest, GeneratorOfTheWrongSizeFailsTheWrite) {
  GgufWriter w;
  ASSERT_OK(w.AddGeneratedTensor(
      "g", {4}, kF32, []() -> absl::StatusOr<std::string> { return std::string(3, 'x'); }));
  EXPECT_THAT(w.Serialize(), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("tensor 'g': generator gave 3 bytes, the shape "
                                                "needs 16")));
}

TEST(GgufWriterTest, SettingAKeyAgainReplacesItInPlace) {
  GgufWriter a;
  a.SetUint32("x", 1);
  a.SetUint32("y", 2);
  a.SetUint32("x", 3);
  GgufWriter b;
  b.SetUint32("x", 3);
  b.SetUint32("y", 2);
  EXPECT_EQ(*a.Serialize(), *b.Serialize());
}

TEST(GgufWriterTest, ArrayItemsOfTheWrongTypeAreRejected) {
  GgufWriter w;
  w.SetArray("mixed", GgufValueType::kUint32, {GgufValue(uint32_t{1}), GgufValue(int32_t{2})});
  EXPECT_THAT(w.Serialize(), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("metadata key 'mixed': array of UINT32 holds a "
                                                "INT32")));
}

TEST(GgufWriterTest, DataOfTheWrongSizeIsRejected) {
  GgufWriter w;
  EXPECT_THAT(w.AddTensor("w", {32}, kQ8_0, std::string(32, '\0')),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'w': 32 bytes of data, the shape needs 34")));
}

TEST(GgufWriterTest, RowsThatAreNotWholeBlocksAreRejected) {
  GgufWriter w;
  EXPECT_THAT(w.AddSparseTensor("w", {576, 2}, kQ4_K),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("row length 576 is not a multiple of the Q4_K block size 256")));
}

TEST(GgufWriterTest, RemovedTypesCannotBeWrittenThroughTheCheckedPath) {
  GgufWriter w;
  EXPECT_THAT(
      w.AddSparseTensor("w", {32}, 4),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ggml type id 4 cannot be written")));
}

TEST(GgufWriterTest, DuplicateTensorNamesAreRejected) {
  GgufWriter w;
  ASSERT_OK(w.AddSparseTensor("w", {4}, kF32));
  EXPECT_THAT(w.AddSparseTensor("w", {4}, kF32),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("duplicate tensor name 'w'")));
}

TEST(GgufWriterTest, WriteIntoAMissingDirectoryIsNotFound) {
  TempDir dir;
  EXPECT_THAT(SmallWriter().WriteFile(dir.Join("no/such/dir/m.gguf")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("m.gguf.tmp")));
}

}  // namespace
}  // namespace modelfs
