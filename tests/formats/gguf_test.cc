// ParseGguf on files written by GgufWriter (and, for corruptions the writer cannot express,
// bytes patched by hand).
#include "core/formats/gguf.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/formats/gguf_writer.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::IsOk;
using ::modelfs::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint32_t kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ8_0 = 8, kQ4_K = 12;

absl::StatusOr<GgufFile> ParseBytes(const std::string& bytes) {
  auto reader = MakeMemoryRangeReader("test.gguf", bytes);
  return ParseGguf(*reader);
}

std::string MustSerialize(const GgufWriter& w) {
  auto bytes = w.Serialize();
  EXPECT_THAT(bytes, IsOk());
  return bytes.ok() ? *bytes : std::string();
}

std::string U32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
std::string U64(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
std::string Str(const std::string& s) { return U64(s.size()) + s; }
// A v3 header with the given counts; the caller appends kvs and tensor infos.
std::string Header(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
  return "GGUF" + U32(version) + U64(tensors) + U64(kvs);
}

// ---- tensor types ----

class EveryTypeTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(EveryTypeTest, WrittenTensorParsesBackWithExactByteCount) {
  const GgmlType* type = FindGgmlType(GetParam());
  ASSERT_NE(type, nullptr);
  GgufWriter w;
  const uint64_t row = 2ull * type->block_size;
  const uint64_t nbytes = 2ull * 3 * type->type_size;
  ASSERT_OK(w.AddTensor("t", {row, 3}, type->id, std::string(nbytes, '\x5a')));
  ASSERT_OK_AND_ASSIGN(GgufFile f, ParseBytes(MustSerialize(w)));
  ASSERT_EQ(f.tensors.size(), 1u);
  const GgufTensor& t = f.tensors[0];
  EXPECT_EQ(t.type_id, type->id);
  EXPECT_EQ(t.type, type);
  EXPECT_THAT(t.dims, ElementsAre(row, 3u));
  EXPECT_EQ(t.elements, row * 3);
  EXPECT_EQ(t.nbytes, t.elements / type->block_size * type->type_size);
  EXPECT_EQ(t.nbytes, nbytes);
  EXPECT_EQ(t.offset, f.data_offset);
}

std::vector<uint32_t> LiveTypeIds() {
  std::vector<uint32_t> ids;
  for (uint32_t id = 0; id < GgmlTypeCount(); ++id) {
    if (!FindGgmlType(id)->removed) ids.push_back(id);
  }
  return ids;
}

INSTANTIATE_TEST_SUITE_P(AllLiveTypeIds, EveryTypeTest, ::testing::ValuesIn(LiveTypeIds()),
                         [](const auto& info) { return FindGgmlType(info.param)->name; });

class RemovedTypeTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(RemovedTypeTest, TensorOfRemovedTypeIsRejectedByName) {
  const GgmlType* type = FindGgmlType(GetParam());
  ASSERT_NE(type, nullptr);
  ASSERT_TRUE(type->removed);
  GgufWriter w;
  w.AddRawTensor({"x", {32, 2}, type->id, 64, std::nullopt});
  EXPECT_THAT(ParseBytes(MustSerialize(w)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat("tensor 'x' uses removed ggml type ", type->name,
                                              " (id ", type->id, ")"))));
}

INSTANTIATE_TEST_SUITE_P(RemovedIds, RemovedTypeTest,
                         ::testing::Values(4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u),
                         [](const auto& info) { return FindGgmlType(info.param)->name; });

TEST(GgufParseTest, RemovedQ4_2MessageMatchesTheDocumentedWording) {
  GgufWriter w;
  w.AddRawTensor({"x", {32}, 4, 32, std::nullopt});
  EXPECT_THAT(ParseBytes(MustSerialize(w)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'x' uses removed ggml type Q4_2 (id 4)")));
}

TEST(GgufParseTest, UnknownTypeIdIsRejected) {
  GgufWriter w;
  w.AddRawTensor({"x", {32}, 43, 32, std::nullopt});
  EXPECT_THAT(ParseBytes(MustSerialize(w)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'x' (info at byte 24) has unknown ggml type id 43")));
}

// ---- versions ----

TEST(GgufParseTest, Version2FileParses) {
  GgufWriter w;
  w.SetVersion(2);
  w.SetString("general.architecture", "llama");
  ASSERT_OK(w.AddTensor("w", {4}, kF32, std::string(16, '\0')));
  ASSERT_OK_AND_ASSIGN(GgufFile f, ParseBytes(MustSerialize(w)));
  EXPECT_EQ(f.version, 2u);
  EXPECT_EQ(f.Architecture(), "llama");
  EXPECT_EQ(f.tensors.size(), 1u);
}

TEST(GgufParseTest, Version3FileParses) {
  GgufWriter w;
  w.SetString("general.architecture", "qwen2");
  ASSERT_OK_AND_ASSIGN(GgufFile f, ParseBytes(MustSerialize(w)));
  EXPECT_EQ(f.version, 3u);
  EXPECT_EQ(f.Architecture(), "qwen2");
}

TEST(GgufParseTest, Version1IsRejectedWithAMessage) {
  GgufWriter w;
  w.SetVersion(1);
  EXPECT_THAT(ParseBytes(MustSerialize(w)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("test.gguf: GGUF v1 is not supported (only v2 and v3)")));
}

TEST(GgufParseTest, UnknownVersionIsRejected) {
  GgufWriter w;
  w.SetVersion(4);
  EXPECT_THAT(ParseBytes(MustSerialize(w)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unsupported GGUF version 4 (only v2 and v3)")));
}

TEST(GgufParseTest, BigEndianFileIsRejected) {
  std::string bytes = "GGUF" + std::string("\0\0\0\3", 4) + std::string(16, '\0');
  EXPECT_THAT(ParseBytes(bytes), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("big-endian GGUF (version 3)")));
}

TEST(GgufParseTest, BadMagicIsRejected) {
  std::string bytes = "GGML" + U32(3) + U64(0) + U64(0);
  EXPECT_THAT(ParseBytes(bytes),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("not a GGUF file: the first four bytes are not 'GGUF'")));
}

TEST(GgufParseTest, EmptyFileIsNotAGgufFile) {
  EXPECT_THAT(ParseBytes(""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a GGUF file")));
}

// ---- metadata values ----

GgufWriter AllValueTypesWriter() {
  GgufWriter w;
  w.SetUint8("u8", 200);
  w.SetInt8("i8", -100);
  w.SetUint16("u16", 60000);
  w.SetInt16("i16", -30000);
  w.SetUint32("u32", 4000000000u);
  w.SetInt32("i32", -2000000000);
  w.SetFloat32("f32", 0.15625f);
  w.SetBool("bool", true);
  w.SetString("str", "héllo");
  w.SetUint64("u64", 18000000000000000000ull);
  w.SetInt64("i64", -9000000000000000000ll);
  w.SetFloat64("f64", -1.0e300);
  w.SetArray(
      "nested", GgufValueType::kArray,
      {GgufValue::Array(GgufValueType::kInt32, {GgufValue(int32_t{1}), GgufValue(int32_t{-2})}),
       GgufValue::Array(GgufValueType::kInt32, {}),
       GgufValue::Array(GgufValueType::kArray,
                        {GgufValue::Array(GgufValueType::kString, {GgufValue::String("deep")})})});
  w.SetArray("bools", GgufValueType::kBool, {GgufValue(false), GgufValue(true)});
  return w;
}

TEST(GgufMetadataTest, AllThirteenValueTypesRoundTripWithTheirTypeNames) {
  ASSERT_OK_AND_ASSIGN(GgufFile f, ParseBytes(MustSerialize(AllValueTypesWriter())));
  ASSERT_EQ(f.metadata.size(), 14u);
  std::vector<std::string> types;
  for (const auto& [k, v] : f.metadata) types.push_back(v.type_name());
  EXPECT_THAT(types, ElementsAre("UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
                                 "BOOL", "STRING", "UINT64", "INT64", "FLOAT64", "ARRAY", "ARRAY"));
  EXPECT_EQ(*f.Find("u8"), GgufValue(uint8_t{200}));
  EXPECT_EQ(*f.Find("i8"), GgufValue(int8_t{-100}));
  EXPECT_EQ(*f.Find("u16"), GgufValue(uint16_t{60000}));
  EXPECT_EQ(*f.Find("i16"), GgufValue(int16_t{-30000}));
  EXPECT_EQ(*f.Find("u32"), GgufValue(uint32_t{4000000000u}));
  EXPECT_EQ(*f.Find("i32"), GgufValue(int32_t{-2000000000}));
  EXPECT_EQ(*f.Find("f32"), GgufValue(0.15625f));
  EXPECT_EQ(*f.Find("bool"), GgufValue(true));
  EXPECT_EQ(*f.Find("str"), GgufValue::String("héllo"));
  EXPECT_EQ(*f.Find("u64"), GgufValue(uint64_t{18000000000000000000ull}));
  EXPECT_EQ(*f.Find("i64"), GgufValue(int64_t{-9000000000000000000ll}));
  EXPECT_EQ(*f.Find("f64"), GgufValue(-1.0e300));
}

TEST(GgufMetadataTest, NestedArraysRoundTripWithElementTypes) {
  GgufWriter w = AllValueTypesWriter();
  ASSERT_OK_AND_ASSIGN(GgufFile f, ParseBytes(MustSerialize(w)));
  const GgufArray* outer = f.Find("nested")->AsArray();
  ASSERT_NE(outer, nullptr);
  EXPECT_EQ(outer->element_type, GgufValueType::kArray);
  ASSERT_EQ(outer->items.size(), 3u);
  EXPECT_EQ(outer->items[0].AsArray()->element_type, GgufValueType::kInt32);
  EXPECT_EQ(outer->items[1].AsArray()->items.size(), 0u);
  EXPECT_EQ(GgufValueToJson(*f.Find("nested")).dump(), R"([[1,-2],[],[["deep"]]])");
}

TEST(GgufMetadataTest, KeysKeepFileOrder) {
  GgufWriter w;
  w.SetString("zeta", "1");
  w.SetString("alpha", "2");
  w.SetString("mid", "3");
  ASSERT_OK_AND_ASSIGN(GgufFile f, ParseBytes(MustSerialize(w)));
  std::vector<std::string> keys;
  for (const auto& [k, v] : f.metadata) keys.push_back(k);
  EXPECT_THAT(keys, ElementsAre("zeta", "alpha", "mid"));
}

TEST(GgufMetadataTest, ValueToJsonGivesExactScalars) {
  ASSERT_OK_AND_ASSIGN(GgufFile f, ParseBytes(MustSerialize(AllValueTypesWriter())));
  nlohmann::json j = f.MetadataJson();
  EXPECT_EQ(j["u8"].get<uint64_t>(), 200u);
  EXPECT_EQ(j["i8"].get<int64_t>(), -100);
  EXPECT_EQ(j["u32"].get<uint64_t>(), 4000000000u);
  EXPECT_EQ(j["u64"].get<uint64_t>(), 18000000000000000000ull);
  EXPECT_EQ(j["i64"].get<int64_t>(), -9000000000000000000ll);
  EXPECT_EQ(j["f32"].get<double>(), 0.15625);
  EXPECT_EQ(j["bool"].get<bool>(), true);
  EXPECT_EQ(j["str"].get<std::string>(), "héllo");
  EXPECT_EQ(j["bools"].dump(), "[false,true]");
}

TEST(GgufMetadataTest, LongArraysAreSummarizedWithACompanionCount) {
  GgufWriter w;
  std::vector<std::string> tokens;
  for (int i = 0; i < 20; ++i) tokens.push_back(absl::StrCat("t", i));
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetUint32Array("llama.attention.head_count_kv", {8, 8, 0, 8});
  ASSERT_OK_AND_ASSIGN(GgufFile f, ParseBytes(MustSerialize(w)));
  nlohmann::json j = f.MetadataJson(/*max_array=*/4);
  EXPECT_EQ(j["llama.attention.head_count_kv"].dump(), "[8,8,0,8]");
  EXPECT_EQ(j["tokenizer.ggml.tokens"]["length"].get<uint64_t>(), 20u);
  EXPECT_EQ(j["tokenizer.ggml.tokens"]["element_type"].get<std::string>(), "STRING");
  EXPECT_EQ(j["tokenizer.ggml.tokens"]["head"].size(), 8u);
  EXPECT_EQ(j["tokenizer.ggml.tokens_count"].get<uint64_t>(), 20u);
  EXPECT_EQ(f.GetArrayLength("tokenizer.ggml.tokens"), 20u);
}

TEST(GgufMetadataTest, InvalidUtf8IsReplacedSoJsonDumpDoesNotThrow) {
  GgufWriter w;
  w.SetString("bad", std::string("a\xff\xc0\x80z"));
  ASSERT_OK_AND_ASSIGN(GgufFile f, ParseBytes(MustSerialize(w)));
  EXPECT_EQ(f.MetadataJson().dump(), "{\"bad\":\"a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDz\"}");
}

TEST(GgufMetadataTest, HelpersReadIntegersOfAnyWidthAndStrings) {
  GgufWriter w;
  w.SetUint32("llama.block_count", 30);
  w.SetInt32("neg", -1);
  w.SetUint64("big", 1ull << 40);
  w.SetString("general.name", "x");
  ASSERT_OK_AND_ASSIGN(GgufFile f, ParseBytes(MustSerialize(w)));
  EXPECT_EQ(f.GetUint("llama.block_count"), 30u);
  EXPECT_EQ(f.GetUint("big"), 1ull << 40);
  EXPECT_EQ(f.GetUint("neg"), std::nullopt);
  EXPECT_EQ(f.GetUint("general.name"), std::nullopt);
  EXPECT_EQ(f.GetUint("missing"), std::nullopt);
  EXPECT_EQ(f.GetString("general.name"), "x");
  EXPECT_EQ(f.GetString("llama.block_count"), std::nullopt);
  EXPECT_EQ(f.GetDouble("neg"), -1.0);
}

TEST(GgufMetadataTest, DuplicateKeyIsRejected) {
  GgufWriter w;
  w.SetString("general.name", "a");
  w.AppendDuplicate("general.name", GgufValue::String("b"));
  EXPECT_THAT(ParseBytes(MustSerialize(w)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("duplicate metadata key 'general.name' at byte")));
}

TEST(GgufMetadataTest, UnknownValueTypeIsRejected) {
  std::string bytes = Header(0, 1) + Str("k") + U32(13) + U32(0);
  EXPECT_THAT(ParseBytes(bytes),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("metadata key 'k' at byte 33 has unknown value type 13")));
}

TEST(GgufMetadataTest, OversizedStringLengthIsTruncationNotAnAllocation) {
  std::string bytes = Header(0, 1) + Str("k") + U32(8) + U64(1ull << 62) + "abc";
  EXPECT_THAT(ParseBytes(bytes),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("wants 4611686018427387904 bytes at byte 45 but only 3 remain")));
}

TEST(GgufMetadataTest, OversizedArrayCountIsRejectedBeforeReserving) {
  std::string bytes = Header(0, 1) + Str("tokens") + U32(9) + U32(8) + U64(1ull << 61) + U64(0);
  EXPECT_THAT(ParseBytes(bytes),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("metadata key 'tokens' at byte 42: array of "
                                 "2305843009213693952 STRING elements at byte 42 needs at least")));
}

TEST(GgufMetadataTest, ArraysNestedTooDeeplyAreRejected) {
  // 9 levels of arrays, each holding one array, the innermost empty.
  std::string value;
  for (int i = 0; i < 8; ++i) value += U32(9) + U64(1);
  value += U32(0) + U64(0);
  std::string bytes = Header(0, 1) + Str("deep") + U32(9) + value;
  EXPECT_THAT(ParseBytes(bytes), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("arrays nested more than 8 deep")));
}

TEST(GgufMetadataTest, EightLevelsOfNestingAreAccepted) {
  std::string value;
  for (int i = 0; i < 7; ++i) value += U32(9) + U64(1);
  value += U32(0) + U64(0);
  std::string bytes = Header(0, 1) + Str("deep") + U32(9) + value;
  EXPECT_THAT(ParseBytes(bytes), IsOk());
}

TEST(GgufMetadataTest, TotalArrayElementsAreCapped) {
  GgufWriter w;
  w.SetArray("a", GgufValueType::kUint8, std::vector<GgufValue>(10, GgufValue(uint8_t{1})));
  w.SetArray("b", GgufValueType::kUint8, std::vector<GgufValue>(10, GgufValue(uint8_t{1})));
  auto reader = MakeMemoryRangeReader("test.gguf", MustSerialize(w));
  GgufParseLimits limits;
  limits.max_array_elements = 15;
  EXPECT_THAT(ParseGguf(*reader, limits),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("metadata key 'b' at byte 72: array of 10 elements takes the "
                                 "header past the limit of 15 array elements")));
}

TEST(GgufMetadataTest, KeyCountThatCannotFitIsRejected) {
  std::string bytes = Header(0, 1ull << 40) + std::string(64, '\0');
  EXPECT_THAT(ParseBytes(bytes), StatusIs(absl::StatusCode::kOutOfRange,
                                          HasSubstr("header declares 1099511627776 metadata keys "
                                                    "and 0 tensors, which cannot fit")));
}

TEST(GgufMetadataTest, TensorCountThatCannotFitIsRejected) {
  std::string bytes = Header(1ull << 50, 0) + std::string(64, '\0');
  EXPECT_THAT(ParseBytes(bytes),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("1125899906842624 tensors")));
}

TEST(GgufMetadataTest, TensorCountOverTheLimitIsRejected) {
  GgufWriter w;
  ASSERT_OK(w.AddSparseTensor("a", {4}, kF32));
  ASSERT_OK(w.AddSparseTensor("b", {4}, kF32));
  auto reader = MakeMemoryRangeReader("test.gguf", MustSerialize(w));
  GgufParseLimits limits;
  limits.max_tensors = 1;
  EXPECT_THAT(ParseGguf(*reader, limits),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("header declares 0 metadata keys and 2 tensors; the limits are "
                                 "1048576 and 1")));
}

// ---- alignment ----

TEST(GgufAlignmentTest, DefaultAlignmentIs32) {
  GgufWriter w;
  w.SetString("k", "v");
  ASSERT_OK(w.AddTensor("a", {3}, kF32, std::string(12, '\1')));
  ASSERT_OK(w.AddTensor("b", {2}, kF32, std::string(8, '\2')));
  ASSERT_OK_AND_ASSIGN(GgufFile f, ParseBytes(MustSerialize(w)));
  EXPECT_EQ(f.alignment, 32u);
  EXPECT_EQ(f.data_offset % 32, 0u);
  EXPECT_EQ(f.tensors[1].offset - f.tensors[0].offset, 32u);
  EXPECT_EQ(f.file_size, f.data_offset + 64);
  EXPECT_EQ(f.TotalTensorBytes(), 20u);
  EXPECT_EQ(f.PaddingBytes(), 44u);
}

TEST(GgufAlignmentTest, CustomAlignmentIsHonoured) {
  GgufWriter w;
  w.SetAlignment(256);
  ASSERT_OK(w.AddTensor("a", {3}, kF32, std::string(12, '\1')));
  ASSERT_OK(w.AddTensor("b", {2}, kF32, std::string(8, '\2')));
  ASSERT_OK_AND_ASSIGN(GgufFile f, ParseBytes(MustSerialize(w)));
  EXPECT_EQ(f.alignment, 256u);
  EXPECT_EQ(f.data_offset, 256u);
  EXPECT_EQ(f.tensors[0].offset, 256u);
  EXPECT_EQ(f.tensors[1].offset, 512u);
}

TEST(GgufAlignmentTest, AlignmentThatIsNotAPowerOfTwoIsRejected) {
  GgufWriter w;
  w.SetAlignment(48);
  EXPECT_THAT(ParseBytes(MustSerialize(w)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("general.alignment must be a power of two, got 48")));
}

TEST(GgufAlignmentTest, ZeroAlignmentIsRejected) {
  GgufWriter w;
  w.SetAlignment(0);
  EXPECT_THAT(ParseBytes(MustSerialize(w)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("general.alignment must be a power of two, got 0")));
}

TEST(GgufAlignmentTest, AlignmentOfAnotherTypeIsRejected) {
  GgufWriter w;
  w.SetUint64("general.alignment", 32);
  EXPECT_THAT(ParseBytes(MustSerialize(w)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("general.alignment must be a UINT32, got UINT64")));
}

TEST(GgufAlignmentTest, MisalignedOffsetIsRejected) {
  GgufWriter w;
  w.AddRawTensor({"w", {4}, kF32, 16, uint64_t{8}});
  EXPECT_THAT(ParseBytes(MustSerialize(w)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'w' (info at byte 24): offset 8 is not a multiple of "
                                 "the alignment 32")));
}

// ---- tensor layout ----

TEST(GgufTensorTest, DimsKeepRowLengthFirstAndOffsetsAreAbsolute) {
  GgufWriter w;
  ASSERT_OK(w.AddSparseTensor("token_embd.weight", {576, 49152}, kQ8_0));
  ASSERT_OK_AND_ASSIGN(GgufFile f, ParseBytes(MustSerialize(w)));
  const GgufTensor* t = f.FindTensor("token_embd.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_THAT(t->dims, ElementsAre(576u, 49152u));
  EXPECT_EQ(t->elements, 28311552u);
  EXPECT_EQ(t->nbytes, 30081024u);
  EXPECT_EQ(t->offset, f.data_offset);
  EXPECT_EQ(f.file_size, f.data_offset + 30081024u);
}

TEST(GgufTensorTest, DataSectionStartsAtTheAlignedEndOfTensorInfos) {
  GgufWriter w;
  ASSERT_OK(w.AddTensor("w", {4}, kF32, std::string(16, '\0')));
  ASSERT_OK_AND_ASSIGN(GgufFile f, ParseBytes(MustSerialize(w)));
  // 24 header + (8 + 1 name) + 4 n_dims + 8 dim + 4 type + 8 offset = 57 -> 64.
  EXPECT_EQ(f.data_offset, 64u);
}

TEST(GgufTensorTest, ZeroDimensionTensorIsAScalar) {
  GgufWriter w;
  ASSERT_OK(w.AddTensor("s", {}, kF32, std::string(4, '\0')));
  ASSERT_OK_AND_ASSIGN(GgufFile f, ParseBytes(MustSerialize(w)));
  EXPECT_EQ(f.tensors[0].elements, 1u);
  EXPECT_EQ(f.tensors[0].nbytes, 4u);
}

TEST(GgufTensorTest, MoreThanFourDimsIsRejected) {
  GgufWriter w;
  w.AddRawTensor({"five", {1, 1, 1, 1, 1}, kF32, 4, std::nullopt});
  EXPECT_THAT(ParseBytes(MustSerialize(w)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'five' (info at byte 24) has 5 dimensions; GGUF allows "
                                 "at most 4")));
}

TEST(GgufTensorTest, NegativeDimensionIsRejected) {
  GgufWriter w;
  w.AddRawTensor({"neg", {4, ~0ull}, kF32, 0, std::nullopt});
  EXPECT_THAT(ParseBytes(MustSerialize(w)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'neg' (info at byte 24): dimension 1 is negative (-1)")));
}

TEST(GgufTensorTest, ElementCountOverflowIsRejected) {
  GgufWriter w;
  w.AddRawTensor({"huge", {1ull << 32, 1ull << 32}, kF32, 0, std::nullopt});
  EXPECT_THAT(ParseBytes(MustSerialize(w)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'huge' (info at byte 24): element count overflows")));
}

TEST(GgufTensorTest, RowNotMultipleOfBlockSizeIsRejected) {
  GgufWriter w;
  w.AddRawTensor({"w", {100, 2}, kQ4_K, 0, std::nullopt});
  EXPECT_THAT(ParseBytes(MustSerialize(w)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'w' (info at byte 24): row length 100 is not a multiple "
                                 "of the Q4_K block size 256")));
}

TEST(GgufTensorTest, DuplicateTensorNameIsRejected) {
  GgufWriter w;
  w.AddRawTensor({"w", {8}, kF32, 32, std::nullopt});
  w.AddRawTensor({"w", {8}, kF32, 32, std::nullopt});
  EXPECT_THAT(ParseBytes(MustSerialize(w)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("duplicate tensor name 'w' at byte 57")));
}

TEST(GgufTensorTest, OverlappingTensorsAreRejected) {
  GgufWriter w;
  w.AddRawTensor({"a", {16}, kF32, 64, uint64_t{0}});
  w.AddRawTensor({"b", {8}, kF32, 32, uint64_t{32}});
  ASSERT_OK_AND_ASSIGN(std::string bytes, w.Serialize());
  ASSERT_OK_AND_ASSIGN(uint64_t header, w.HeaderSize());
  EXPECT_THAT(
      ParseBytes(bytes),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr(absl::StrCat("tensors 'a' [", header, ", ", header + 64, ") and 'b' [",
                                      header + 32, ", ", header + 64, ") overlap"))));
}

TEST(GgufTensorTest, OverlapIsFoundWhateverTheInfoOrder) {
  GgufWriter w;
  w.AddRawTensor({"late", {8}, kF32, 32, uint64_t{96}});
  w.AddRawTensor({"big", {64}, kF32, 256, uint64_t{0}});
  EXPECT_THAT(ParseBytes(MustSerialize(w)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tensors 'big' [")));
}

TEST(GgufTensorTest, AdjacentTensorsDoNotOverlap) {
  GgufWriter w;
  w.AddRawTensor({"a", {8}, kF32, 32, uint64_t{0}});
  w.AddRawTensor({"b", {8}, kF32, 32, uint64_t{32}});
  EXPECT_THAT(ParseBytes(MustSerialize(w)), IsOk());
}

TEST(GgufTensorTest, TensorRunningPastTheEndIsTruncation) {
  GgufWriter w;
  ASSERT_OK(w.AddTensor("w", {64}, kF32, std::string(256, '\0')));
  std::string bytes = MustSerialize(w);
  bytes.resize(bytes.size() - 1);
  EXPECT_THAT(ParseBytes(bytes),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("tensor 'w' data at data offset 0 + 256 bytes runs past the end "
                                 "of the file (255 data bytes after byte 64)")));
}

TEST(GgufTensorTest, TruncationAnywhereInTheHeaderIsAnErrorNotACrash) {
  GgufWriter w = AllValueTypesWriter();
  ASSERT_OK(w.AddTensor("w", {32}, kQ8_0, std::string(34, '\0')));
  const std::string bytes = MustSerialize(w);
  ASSERT_OK_AND_ASSIGN(GgufFile full, ParseBytes(bytes));
  for (size_t cut = 0; cut < full.data_offset; ++cut) {
    auto f = ParseBytes(bytes.substr(0, cut));
    ASSERT_FALSE(f.ok()) << "cut at " << cut;
    if (cut >= 4) {
      EXPECT_EQ(f.status().code(), absl::StatusCode::kOutOfRange) << f.status();
      EXPECT_THAT(std::string(f.status().message()), HasSubstr("truncated")) << "cut at " << cut;
    }
  }
}

TEST(GgufTensorTest, TruncatedKeyMessageNamesTheKey) {
  std::string bytes = Header(0, 1) + Str("general.name") + U32(8) + U64(10) + "abc";
  EXPECT_THAT(ParseBytes(bytes),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("(metadata key 'general.name' at byte 48: string of 10 bytes at "
                                 "byte 48)")));
}

TEST(GgufTensorTest, FileWithoutTensorsMayOmitFinalPadding) {
  std::string bytes = Header(0, 1) + Str("k") + U32(4) + U32(7);
  ASSERT_OK_AND_ASSIGN(GgufFile f, ParseBytes(bytes));
  EXPECT_EQ(f.data_offset, bytes.size());
  EXPECT_EQ(f.PaddingBytes(), 0u);
  EXPECT_EQ(f.GetUint("k"), 7u);
}

TEST(GgufTensorTest, MixedTypesGiveExactTotals) {
  GgufWriter w;
  ASSERT_OK(w.AddSparseTensor("q8", {64, 2}, kQ8_0));  // 4 blocks * 34 = 136
  ASSERT_OK(w.AddSparseTensor("q4", {32}, kQ4_0));     // 18
  ASSERT_OK(w.AddSparseTensor("f16", {3, 3}, kF16));   // 18
  ASSERT_OK_AND_ASSIGN(GgufFile f, ParseBytes(MustSerialize(w)));
  EXPECT_EQ(f.TotalElements(), 128u + 32u + 9u);
  EXPECT_EQ(f.TotalTensorBytes(), 136u + 18u + 18u);
  EXPECT_EQ(f.data_offset + f.TotalTensorBytes() + f.PaddingBytes(), f.file_size);
}

// ---- fuzz seeds ----

TEST(GgufCorpusTest, FuzzSeedsParseExceptTheDeliberatelyBrokenOne) {
  const char* src = getenv("MODELFS_SOURCE_DIR");
  SKIP_OR_FAIL_IF_UNAVAILABLE(src == nullptr ? "MODELFS_SOURCE_DIR is not set (run through ctest)"
                                             : "");
  const std::string dir = std::string(src) + "/tests/fuzz/corpus/gguf/";
  for (const char* name :
       {"empty_v3.gguf", "v2_scalars.gguf", "all_value_types.gguf", "f32_tensor.gguf",
        "q8_0_tensor.gguf", "q4_0_tensor.gguf", "align64_two_tensors.gguf", "tokenizer.gguf",
        "dims_bf16_f16.gguf", "llama_kquant.gguf"}) {
    ASSERT_OK_AND_ASSIGN(auto reader, OpenFileRangeReader(dir + name));
    EXPECT_THAT(ParseGguf(*reader), IsOk()) << name;
  }
  ASSERT_OK_AND_ASSIGN(auto reader, OpenFileRangeReader(dir + "dup_key.gguf"));
  EXPECT_THAT(ParseGguf(*reader), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("duplicate metadata key 'k'")));
}

}  // namespace
}  // namespace modelfs
