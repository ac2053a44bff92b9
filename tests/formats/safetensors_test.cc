#include "core/formats/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/io/range_reader.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

using ::modelfs::testing::IsOk;
using ::modelfs::testing::StatusIs;
using ::modelfs::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A byte-string literal with its embedded NULs.
template <size_t N>
std::string B(const char (&s)[N]) {
  return std::string(s, N - 1);
}

absl::StatusOr<SafetensorsFile> Parse(const std::string& bytes) {
  auto reader = MakeMemoryRangeReader("t.safetensors", bytes);
  return ParseSafetensors(*reader);
}

std::string Le64(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out;
}

// A file with the given JSON header followed by `data_bytes` zero bytes.
std::string Raw(const std::string& json, uint64_t data_bytes) {
  return Le64(json.size()) + json + std::string(data_bytes, '\0');
}

// ---- The byte strings from the reference implementation's tests (safetensors/src/tensor.rs).

TEST(SafetensorsReferenceTest, AcceptsTheDeserializationVector) {
  ASSERT_OK_AND_ASSIGN(
      SafetensorsFile f,
      Parse(B("<\x00\x00\x00\x00\x00\x00\x00{\"test\":{\"dtype\":\"I32\",\"shape\":[2,2],"
              "\"data_offsets\":[0,16]}}\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
              "\x00\x00\x00")));
  EXPECT_EQ(f.header_size, 60u);
  EXPECT_EQ(f.data_start, 68u);
  EXPECT_EQ(f.file_size, 84u);
  EXPECT_THAT(f.metadata, IsEmpty());
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_EQ(f.tensors[0].name, "test");
  EXPECT_EQ(f.tensors[0].dtype, "I32");
  EXPECT_THAT(f.tensors[0].shape, ElementsAre(2, 2));
  EXPECT_EQ(f.tensors[0].begin, 0u);
  EXPECT_EQ(f.tensors[0].end, 16u);
  EXPECT_EQ(f.tensors[0].elements, 4u);
}

TEST(SafetensorsReferenceTest, AcceptsARankZeroTensor) {
  ASSERT_OK_AND_ASSIGN(
      SafetensorsFile f,
      Parse(B("8\x00\x00\x00\x00\x00\x00\x00{\"test\":{\"dtype\":\"I32\",\"shape\":[],"
              "\"data_offsets\":[0,4]}}\x00\x00\x00\x00")));
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_THAT(f.tensors[0].shape, IsEmpty());
  EXPECT_EQ(f.tensors[0].elements, 1u);
  EXPECT_EQ(f.tensors[0].size(), 4u);
}

TEST(SafetensorsReferenceTest, RejectsPolyglotBytesAfterTheLastTensor) {
  EXPECT_THAT(
      Parse(B("<\x00\x00\x00\x00\x00\x00\x00{\"test\":{\"dtype\":\"I32\",\"shape\":[2,2],"
              "\"data_offsets\":[0,16]}}\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
              "\x00\x00\x00"
              "extra_bogus_data_for_polyglot_file")),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("34 trailing bytes after the last tensor (data ends at byte 84")));
}

TEST(SafetensorsReferenceTest, RejectsDataTwoBytesShort) {
  EXPECT_THAT(
      Parse(B("<\x00\x00\x00\x00\x00\x00\x00{\"test\":{\"dtype\":\"I32\",\"shape\":[2,2],"
              "\"data_offsets\":[0,16]}}\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
              "\x00")),
      StatusIs(absl::StatusCode::kOutOfRange,
               HasSubstr("truncated: tensors end at data offset 16 (byte 68 + 16) but the file "
                         "is 82 bytes")));
}

TEST(SafetensorsReferenceTest, RejectsAHeaderLengthAbove100MB) {
  EXPECT_THAT(
      Parse(B("<\x00\x00\x00\x00\xff\xff\xff{\"test\":{\"dtype\":\"I32\",\"shape\":[2,2],"
              "\"data_offsets\":[0,16]}}\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
              "\x00\x00\x00")),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("safetensors header too large: length field says 18446742974197923900 "
                         "bytes, the limit is 100000000")));
}

TEST(SafetensorsReferenceTest, RejectsAnEmptyFile) {
  EXPECT_THAT(Parse(""), StatusIs(absl::StatusCode::kOutOfRange,
                                  HasSubstr("t.safetensors: truncated: file is 0 bytes")));
}

TEST(SafetensorsReferenceTest, RejectsAHeaderLengthPastTheEnd) {
  EXPECT_THAT(Parse(B("<\x00\x00\x00\x00\x00\x00\x00")),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("header of 60 bytes ends at byte 68 but the file is 8 bytes")));
}

TEST(SafetensorsReferenceTest, RejectsANonUtf8Header) {
  EXPECT_THAT(Parse(B("\x01\x00\x00\x00\x00\x00\x00\x00\xff")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("header is not valid UTF-8 (byte 8 of the file)")));
}

TEST(SafetensorsReferenceTest, RejectsAHeaderThatIsNotJson) {
  EXPECT_THAT(Parse(B("\x01\x00\x00\x00\x00\x00\x00\x00{")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("safetensors header is not valid JSON")));
}

TEST(SafetensorsReferenceTest, AcceptsTrailingWhitespacePadding) {
  ASSERT_OK_AND_ASSIGN(SafetensorsFile f,
                       Parse(B("\x06\x00\x00\x00\x00\x00\x00\x00{}\x0D\x20\x09\x0A")));
  EXPECT_THAT(f.tensors, IsEmpty());
  EXPECT_EQ(f.file_size, 14u);
}

// The reference keeps its InvalidHeaderStart check commented out "for 0.4.0", so JSON
// whitespace around the object is accepted, as it is there.
TEST(SafetensorsReferenceTest, AcceptsWhitespaceAroundTheHeaderObject) {
  ASSERT_OK_AND_ASSIGN(SafetensorsFile f,
                       Parse(B("\x06\x00\x00\x00\x00\x00\x00\x00\x09\x0A{}\x0D\x20")));
  EXPECT_TRUE(f.tensors.empty());
}

TEST(SafetensorsReferenceTest, RejectsAHeaderThatIsNotAnObject) {
  EXPECT_THAT(Parse(B("\x04\x00\x00\x00\x00\x00\x00\x00  []")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must start with '{'")));
}

TEST(SafetensorsReferenceTest, AcceptsAZeroSizedTensor) {
  ASSERT_OK_AND_ASSIGN(
      SafetensorsFile f,
      Parse(B("<\x00\x00\x00\x00\x00\x00\x00{\"test\":{\"dtype\":\"I32\",\"shape\":[2,0],"
              "\"data_offsets\":[0, 0]}}")));
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_THAT(f.tensors[0].shape, ElementsAre(2, 0));
  EXPECT_EQ(f.tensors[0].elements, 0u);
  EXPECT_EQ(f.tensors[0].size(), 0u);
  EXPECT_EQ(f.file_size, 68u);
}

TEST(SafetensorsReferenceTest, RejectsOffsetsThatDisagreeWithShapeAndDtype) {
  EXPECT_THAT(Parse(B("<\x00\x00\x00\x00\x00\x00\x00{\"test\":{\"dtype\":\"I32\",\"shape\":[2,2],"
                      "\"data_offsets\":[0, 4]}}")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'test' (I32 [2,2]) needs 16 bytes but data_offsets [0, 4] "
                                 "span 4")));
}

TEST(SafetensorsReferenceTest, RejectsAShapeWhoseElementCountOverflows) {
  EXPECT_THAT(
      Parse(B("O\x00\x00\x00\x00\x00\x00\x00{\"test\":{\"dtype\":\"I32\",\"shape\":[2,"
              "18446744073709551614],\"data_offsets\":[0,16]}}\x00\x00\x00\x00\x00\x00\x00\x00"
              "\x00\x00\x00\x00\x00\x00\x00\x00")),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("tensor 'test': shape [2,18446744073709551614] of I32 overflows")));
}

TEST(SafetensorsReferenceTest, RejectsAShapeWhoseBitCountOverflows) {
  EXPECT_THAT(
      Parse(B("N\x00\x00\x00\x00\x00\x00\x00{\"test\":{\"dtype\":\"I32\",\"shape\":[2,"
              "9223372036854775807],\"data_offsets\":[0,16]}}\x00\x00\x00\x00\x00\x00\x00\x00"
              "\x00\x00\x00\x00\x00\x00\x00\x00")),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("tensor 'test': shape [2,9223372036854775807] of I32 overflows")));
}

TEST(SafetensorsReferenceTest, RejectsTenTensorsSharingOneRange) {
  std::string json = "{";
  for (int i = 0; i < 10; ++i) {
    if (i) json += ",";
    json += "\"weight_" + std::to_string(i) +
            "\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}";
  }
  json += "}";
  EXPECT_THAT(Parse(Raw(json, 16)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'weight_1' has invalid data_offsets [0, 16] (overlap: "
                                 "the previous tensor ends at 16)")));
}

// ---- The writer reproduces the reference serializer's bytes.

std::string F32Bytes(std::vector<float> v) {
  std::string out(v.size() * 4, '\0');
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

TEST(SafetensorsWriterTest, SerializesLikeTheReference) {
  SafetensorsWriter w;
  ASSERT_OK(w.AddTensor("attn.0", "F32", {1, 2, 3}, F32Bytes({0, 1, 2, 3, 4, 5})));
  const std::string expected =
      Le64(64) + "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}" +
      F32Bytes({0, 1, 2, 3, 4, 5});
  EXPECT_EQ(w.Serialize(), expected);
}

TEST(SafetensorsWriterTest, PadsTheHeaderWithSpacesToAMultipleOfEight) {
  SafetensorsWriter w;
  ASSERT_OK(w.AddTensor("attn0", "F32", {1, 1, 2, 3}, F32Bytes({0, 1, 2, 3, 4, 5})));
  const std::string expected =
      Le64(72) +
      "{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],\"data_offsets\":[0,24]}}       " +
      F32Bytes({0, 1, 2, 3, 4, 5});
  EXPECT_EQ(w.Serialize(), expected);
}

TEST(SafetensorsWriterTest, SerializesAnEmptyFileLikeTheReference) {
  SafetensorsWriter w;
  EXPECT_EQ(w.Serialize(), B("\x08\x00\x00\x00\x00\x00\x00\x00{}      "));
}

TEST(SafetensorsWriterTest, SerializesMetadataLikeTheReference) {
  SafetensorsWriter w;
  w.SetMetadata("framework", "pt");
  EXPECT_EQ(w.Serialize(), Le64(40) + "{\"__metadata__\":{\"framework\":\"pt\"}}     ");
  ASSERT_OK_AND_ASSIGN(SafetensorsFile f, Parse(w.Serialize()));
  EXPECT_EQ(f.metadata.at("framework"), "pt");
}

TEST(SafetensorsWriterTest, LaysOutWiderDtypesFirstThenByName) {
  SafetensorsWriter w;
  ASSERT_OK(w.AddTensor("b", "U8", {1}, "\x01"));
  ASSERT_OK(w.AddTensor("a", "U8", {1}, "\x02"));
  ASSERT_OK(w.AddTensor("z", "F64", {1}, std::string(8, '\x03')));
  std::vector<std::string> names;
  for (const SafetensorsTensor& t : w.Layout()) names.push_back(t.name);
  EXPECT_THAT(names, ElementsAre("z", "a", "b"));
}

TEST(SafetensorsWriterTest, EscapesNamesAsJson) {
  SafetensorsWriter w;
  ASSERT_OK(w.AddTensor("q\"\\\n\x01", "U8", {1}, "\x07"));
  ASSERT_OK_AND_ASSIGN(SafetensorsFile f, Parse(w.Serialize()));
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_EQ(f.tensors[0].name, "q\"\\\n\x01");
  EXPECT_THAT(w.SerializeHeader(), HasSubstr("\"q\\\"\\\\\\n\\u0001\""));
}

TEST(SafetensorsWriterTest, RejectsBytesOfTheWrongLength) {
  SafetensorsWriter w;
  EXPECT_THAT(w.AddTensor("w", "BF16", {3}, "abcd"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'w' (BF16 [3]) needs 6 bytes but got 4")));
}

TEST(SafetensorsWriterTest, RejectsAnUnknownDtype) {
  SafetensorsWriter w;
  EXPECT_THAT(w.AddTensor("w", "F128", {1}, std::string(16, '\0')),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown dtype \"F128\"")));
}

TEST(SafetensorsWriterTest, RejectsASubByteScalar) {
  SafetensorsWriter w;
  EXPECT_THAT(w.AddSparseTensor("w", "F4", {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("1 elements of F4 are not a whole number of bytes")));
}

TEST(SafetensorsWriterTest, RejectsADuplicateName) {
  SafetensorsWriter w;
  ASSERT_OK(w.AddTensor("w", "U8", {1}, "a"));
  EXPECT_THAT(w.AddTensor("w", "U8", {1}, "b"),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("tensor 'w'")));
}

TEST(SafetensorsWriterTest, WritesSparseTensorsAsHoles) {
  TempDir dir;
  SafetensorsWriter w;
  // 4 GiB of BF16 costs no disk space: the data is a hole.
  ASSERT_OK(w.AddSparseTensor("big", "BF16", {65536, 32768}));
  ASSERT_OK(w.AddTensor("tail", "U8", {2}, "xy"));
  const std::string path = dir.Join("sparse.safetensors").string();
  ASSERT_OK(w.WriteFile(path));
  ASSERT_OK_AND_ASSIGN(auto reader, OpenFileRangeReader(path));
  ASSERT_OK_AND_ASSIGN(SafetensorsFile f, ParseSafetensors(*reader));
  EXPECT_EQ(f.file_size, std::filesystem::file_size(path));
  EXPECT_EQ(f.file_size, f.data_start + (uint64_t{4} << 30) + 2);
  ASSERT_OK_AND_ASSIGN(std::string tail, reader->ReadAt(f.file_size - 2, 2));
  EXPECT_EQ(tail, "xy");
  ASSERT_OK_AND_ASSIGN(std::string zeros, reader->ReadAt(f.data_start + 12345, 4));
  EXPECT_EQ(zeros, std::string(4, '\0'));
}

TEST(SafetensorsWriterTest, StreamsCallbackTensorsInPieces) {
  TempDir dir;
  SafetensorsWriter w;
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  ASSERT_OK(w.AddTensorFromCallback(
      "w", "U8", {(1u << 20) + 3},
      [&](const SafetensorsTensor& t, uint64_t off, uint64_t len) -> absl::StatusOr<std::string> {
        calls.emplace_back(off, len);
        std::string s(len, '\0');
        for (uint64_t i = 0; i < len; ++i) s[i] = static_cast<char>((off + i) % 251);
        return s;
      }));
  const std::string path = dir.Join("cb.safetensors").string();
  ASSERT_OK(w.WriteFile(path));
  EXPECT_THAT(calls, ElementsAre(std::make_pair(0u, 1u << 20), std::make_pair(1u << 20, 3u)));
  ASSERT_OK_AND_ASSIGN(auto reader, OpenFileRangeReader(path));
  ASSERT_OK_AND_ASSIGN(SafetensorsFile f, ParseSafetensors(*reader));
  ASSERT_OK_AND_ASSIGN(std::string last, reader->ReadAt(f.data_start + (1u << 20) + 2, 1));
  EXPECT_EQ(static_cast<uint8_t>(last[0]), ((1u << 20) + 2) % 251);
}

TEST(SafetensorsWriterTest, ReportsACallbackErrorAndLeavesNoFile) {
  TempDir dir;
  SafetensorsWriter w;
  ASSERT_OK(w.AddTensorFromCallback(
      "w", "U8", {4},
      [](const SafetensorsTensor&, uint64_t, uint64_t) -> absl::StatusOr<std::string> {
        return absl::UnavailableError("source went away");
      }));
  const std::string path = dir.Join("fail.safetensors").string();
  EXPECT_THAT(w.WriteFile(path),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("source went away")));
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

// ---- Bit-exact round trips for every dtype.

class SafetensorsDtypeRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(SafetensorsDtypeRoundTrip, WritesAndParsesBitExactly) {
  const std::string dtype = GetParam();
  const uint32_t bits = *SafetensorsDtypeBits(dtype);
  // A shape of 24 elements is whole bytes for 4-, 6- and 8n-bit types.
  const std::vector<uint64_t> shape = {2, 3, 4};
  const uint64_t bytes = 24 * bits / 8;
  std::string data(bytes, '\0');
  for (uint64_t i = 0; i < bytes; ++i) data[i] = static_cast<char>(i * 37 + bits);

  SafetensorsWriter w;
  ASSERT_OK(w.AddTensor("t", dtype, shape, data));
  ASSERT_OK(w.AddTensor("t.empty", dtype, {3, 0, 5}, ""));
  if (bits % 8 == 0) {
    ASSERT_OK(w.AddTensor("t.scalar", dtype, {}, data.substr(0, bits / 8)));
  }
  w.SetMetadata("dtype", dtype);

  TempDir dir;
  const std::string path = dir.Join("rt.safetensors").string();
  ASSERT_OK(w.WriteFile(path));
  ASSERT_OK_AND_ASSIGN(auto reader, OpenFileRangeReader(path));
  ASSERT_OK_AND_ASSIGN(SafetensorsFile f, ParseSafetensors(*reader));
  EXPECT_EQ(f.metadata.at("dtype"), dtype);
  EXPECT_EQ(f.data_start % 8, 0u);
  ASSERT_EQ(f.tensors.size(), bits % 8 == 0 ? 3u : 2u);

  std::map<std::string, SafetensorsTensor> by_name;
  for (const SafetensorsTensor& t : f.tensors) by_name[t.name] = t;
  const SafetensorsTensor& t = by_name.at("t");
  EXPECT_EQ(t.dtype, dtype);
  EXPECT_THAT(t.shape, ElementsAre(2, 3, 4));
  EXPECT_EQ(t.elements, 24u);
  ASSERT_EQ(t.size(), bytes);
  ASSERT_OK_AND_ASSIGN(std::string back, reader->ReadAt(f.data_start + t.begin, t.size()));
  EXPECT_EQ(back, data);

  const SafetensorsTensor& empty = by_name.at("t.empty");
  EXPECT_THAT(empty.shape, ElementsAre(3, 0, 5));
  EXPECT_EQ(empty.elements, 0u);
  EXPECT_EQ(empty.size(), 0u);

  if (bits % 8 == 0) {
    const SafetensorsTensor& scalar = by_name.at("t.scalar");
    EXPECT_THAT(scalar.shape, IsEmpty());
    EXPECT_EQ(scalar.elements, 1u);
    ASSERT_OK_AND_ASSIGN(std::string s, reader->ReadAt(f.data_start + scalar.begin, bits / 8));
    EXPECT_EQ(s, data.substr(0, bits / 8));
  }
  // The in-memory serializer produces the same bytes as the streamed file.
  ASSERT_OK_AND_ASSIGN(std::string whole, reader->ReadAt(0, f.file_size));
  EXPECT_EQ(whole, w.Serialize());
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, SafetensorsDtypeRoundTrip,
                         ::testing::ValuesIn(SafetensorsDtypes()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST(SafetensorsDtypeTest, TableHasTheReferenceSizesInBits) {
  EXPECT_EQ(SafetensorsDtypes().size(), 22u);
  EXPECT_EQ(SafetensorsDtypeBits("BOOL"), 8u);
  EXPECT_EQ(SafetensorsDtypeBits("F4"), 4u);
  EXPECT_EQ(SafetensorsDtypeBits("F6_E2M3"), 6u);
  EXPECT_EQ(SafetensorsDtypeBits("F6_E3M2"), 6u);
  EXPECT_EQ(SafetensorsDtypeBits("F8_E4M3FNUZ"), 8u);
  EXPECT_EQ(SafetensorsDtypeBits("BF16"), 16u);
  EXPECT_EQ(SafetensorsDtypeBits("C64"), 64u);
  EXPECT_EQ(SafetensorsDtypeBits("U64"), 64u);
  EXPECT_EQ(SafetensorsDtypeBits("f32"), std::nullopt);
}

// ---- Malformed input.

TEST(SafetensorsMalformedTest, RejectsAFileCutInsideTheData) {
  SafetensorsWriter w;
  ASSERT_OK(w.AddTensor("w", "F32", {4}, std::string(16, '\1')));
  std::string bytes = w.Serialize();
  bytes.resize(bytes.size() - 5);
  EXPECT_THAT(Parse(bytes),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("tensors end at data offset 16")));
}

TEST(SafetensorsMalformedTest, RejectsAFileCutInsideTheLengthField) {
  EXPECT_THAT(Parse(std::string("\x10\0\0", 3)),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("file is 3 bytes")));
}

TEST(SafetensorsMalformedTest, RejectsAHeaderOneByteOverTheLimit) {
  // The length is checked before anything that large is read.
  EXPECT_THAT(Parse(Le64(100'000'001) + "{}"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("header too large: length field says 100000001 bytes")));
}

TEST(SafetensorsMalformedTest, RejectsBadJsonWithItsPosition) {
  EXPECT_THAT(Parse(Raw("{\"w\":{\"dtype\":\"F32\",}}", 0)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("safetensors header is not valid JSON: ")));
}

TEST(SafetensorsMalformedTest, RejectsJsonThatIsNotAnObject) {
  EXPECT_THAT(Parse(Raw("{}[]", 0)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not valid JSON")));
}

TEST(SafetensorsMalformedTest, RejectsADuplicateTensorName) {
  EXPECT_THAT(Parse(Raw("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                        "\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                        2)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("duplicate key \"w\" at the top level")));
}

TEST(SafetensorsMalformedTest, RejectsADuplicateFieldInsideATensor) {
  EXPECT_THAT(
      Parse(Raw("{\"w\":{\"dtype\":\"U8\",\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
                1)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("duplicate key \"dtype\" inside \"w\"")));
}

TEST(SafetensorsMalformedTest, RejectsAnUnknownDtype) {
  EXPECT_THAT(
      Parse(Raw("{\"w\":{\"dtype\":\"F12\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tensor 'w': unknown dtype \"F12\"")));
}

TEST(SafetensorsMalformedTest, RejectsAHoleBetweenTensors) {
  EXPECT_THAT(Parse(Raw("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                        "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]}}",
                        6)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'b' has invalid data_offsets [4, 6] (hole: the "
                                 "previous tensor ends at 2)")));
}

TEST(SafetensorsMalformedTest, RejectsAHoleBeforeTheFirstTensor) {
  EXPECT_THAT(Parse(Raw("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}", 3)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'a' has invalid data_offsets [1, 3] (hole")));
}

TEST(SafetensorsMalformedTest, RejectsOverlappingTensors) {
  EXPECT_THAT(Parse(Raw("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                        "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}",
                        6)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'b' has invalid data_offsets [2, 6] (overlap: the "
                                 "previous tensor ends at 4)")));
}

TEST(SafetensorsMalformedTest, RejectsEndBeforeBegin) {
  EXPECT_THAT(
      Parse(Raw("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,18446744073709551615]}}",
                0)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tensor 'b'")));
  EXPECT_THAT(Parse(Raw("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
                        "\"b\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
                        "\"c\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,0]}}",
                        0)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'c' has invalid data_offsets [1, 0]")));
}

TEST(SafetensorsMalformedTest, RejectsTrailingBytes) {
  EXPECT_THAT(Parse(Raw("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 3)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("1 trailing bytes after the last tensor")));
}

TEST(SafetensorsMalformedTest, RejectsAnOverflowingShape) {
  EXPECT_THAT(Parse(Raw("{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],"
                        "\"data_offsets\":[0,2]}}",
                        2)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("shape [4294967296,4294967296] of U8 overflows")));
}

TEST(SafetensorsMalformedTest, RejectsAPartialByteTensor) {
  EXPECT_THAT(Parse(Raw("{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("3 elements of F4 are not a whole number of bytes")));
}

TEST(SafetensorsMalformedTest, RejectsNegativeAndFractionalNumbers) {
  EXPECT_THAT(Parse(Raw("{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"shape\" is not")));
  EXPECT_THAT(Parse(Raw("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1.0]}}", 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"data_offsets\" is not")));
}

TEST(SafetensorsMalformedTest, RejectsThreeDataOffsets) {
  EXPECT_THAT(
      Parse(Raw("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 1)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tensor 'a': \"data_offsets\"")));
}

TEST(SafetensorsMalformedTest, RejectsAMissingField) {
  EXPECT_THAT(Parse(Raw("{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'a': missing field \"shape\"")));
}

TEST(SafetensorsMalformedTest, RejectsNonStringMetadataValues) {
  EXPECT_THAT(Parse(Raw("{\"__metadata__\":{\"format\":1}}", 0)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("\"__metadata__\" value for \"format\" is not a string")));
}

TEST(SafetensorsMalformedTest, RejectsDeepNesting) {
  std::string deep = "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":" +
                     std::string(200, '[') + std::string(200, ']') + "}}";
  EXPECT_THAT(Parse(Raw(deep, 1)), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("nested deeper than 128 levels")));
}

TEST(SafetensorsParseTest, IgnoresUnknownFieldsInsideATensorLikeTheReference) {
  ASSERT_OK_AND_ASSIGN(
      SafetensorsFile f,
      Parse(
          Raw("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"note\":[1]}}", 1)));
  ASSERT_EQ(f.tensors.size(), 1u);
}

TEST(SafetensorsParseTest, AcceptsNullMetadata) {
  ASSERT_OK_AND_ASSIGN(SafetensorsFile f, Parse(Raw("{\"__metadata__\":null}", 0)));
  EXPECT_THAT(f.metadata, IsEmpty());
}

TEST(SafetensorsParseTest, ReadsASmallHeaderWithOneRequest) {
  SafetensorsWriter w;
  ASSERT_OK(w.AddTensor("w", "U8", {3}, "abc"));
  auto reader = MakeMemoryRangeReader("m", w.Serialize());
  ASSERT_OK(ParseSafetensors(*reader));
  EXPECT_EQ(reader->stats().requests, 1u);
}

TEST(SafetensorsParseTest, ParsesFromAPrefixGivenTheFileSize) {
  SafetensorsWriter w;
  ASSERT_OK(w.AddTensor("w", "U8", {300}, std::string(300, 'x')));
  const std::string header = w.SerializeHeader();
  ASSERT_OK_AND_ASSIGN(SafetensorsFile f,
                       ParseSafetensorsBytes(header, header.size() + 300, "prefix"));
  EXPECT_EQ(f.tensors[0].end, 300u);
  EXPECT_THAT(ParseSafetensorsBytes(header.substr(0, 20), header.size() + 300, "prefix"),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("prefix: prefix of 20 bytes")));
}

TEST(SafetensorsParseTest, SortsTwentyThousandTensorsByOffset) {
  SafetensorsWriter w;
  for (int i = 0; i < 20000; ++i) {
    ASSERT_OK(w.AddSparseTensor("layer." + std::to_string(i) + ".weight", i % 2 ? "F32" : "BF16",
                                {16, 8}));
  }
  ASSERT_OK_AND_ASSIGN(SafetensorsFile f, Parse(w.Serialize()));
  ASSERT_EQ(f.tensors.size(), 20000u);
  EXPECT_EQ(SafetensorsParameterCount(f), 20000u * 128);
  // F32 (wider) first in name order, then BF16.
  EXPECT_EQ(f.tensors.front().name, "layer.1.weight");
  EXPECT_EQ(f.tensors.front().dtype, "F32");
  EXPECT_EQ(f.tensors.back().name, "layer.9998.weight");
  EXPECT_EQ(f.tensors.back().end, 10000u * 512 + 10000u * 256);
}

}  // namespace
}  // namespace modelfs
