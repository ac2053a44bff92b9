#include "core/oci/tensor_index.h"

#include <string>

#include "core/oci/tensor_diff.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::testing::HasSubstr;

std::string Pattern(size_t n, int seed = 1) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed * 7 + i / 7) & 0xff);
  return s;
}

// A file of `header` bytes then two tensors, 100 and 60 bytes.
TensorIndex Skeleton(uint64_t file_offset = 0) {
  TensorIndex t;
  t.format = TensorFileFormat::kSafetensors;
  t.layer_digest = Digest::Of("layer");
  t.file_offset = file_offset;
  t.file_size = 40 + 100 + 60;
  t.layer_size = file_offset + t.file_size;
  t.tensors.push_back({"model.embed.weight", "BF16", {10, 5}, 40, 100, {}});
  t.tensors.push_back({"model.norm.weight", "F32", {15}, 140, 60, {}});
  return t;
}

TEST(TensorIndexTest, BuilderHashesEachTensorsBytesWithBlake3) {
  const std::string file = Pattern(200);
  ASSERT_OK_AND_ASSIGN(TensorIndex idx, BuildTensorIndex(Skeleton(), file));
  EXPECT_EQ(idx.tensors[0].hash,
            HashChunkBytes(ChunkDigestAlgorithm::kBlake3, std::string_view(file).substr(40, 100)));
  EXPECT_EQ(idx.tensors[1].hash,
            HashChunkBytes(ChunkDigestAlgorithm::kBlake3, std::string_view(file).substr(140, 60)));
}

TEST(TensorIndexTest, SmallPiecesAndAFileOffsetGiveTheSameHashes) {
  const std::string file = Pattern(200);
  const std::string layer = std::string(512, 't') + file + std::string(1024, '\0');
  TensorIndex sk = Skeleton(512);
  sk.layer_size = layer.size();
  ASSERT_OK_AND_ASSIGN(TensorIndexBuilder b, TensorIndexBuilder::Create(sk, file.substr(0, 40)));
  for (size_t at = 0; at < layer.size(); at += 7) b.Update(std::string_view(layer).substr(at, 7));
  ASSERT_OK_AND_ASSIGN(TensorIndex idx, b.Finish());
  ASSERT_OK_AND_ASSIGN(TensorIndex whole, BuildTensorIndex(Skeleton(), file));
  EXPECT_EQ(idx.tensors, whole.tensors);
}

TEST(TensorIndexTest, AHeaderOtherThanTheOneStreamedIsDataLoss) {
  const std::string file = Pattern(200);
  std::string other_header = file.substr(0, 40);
  other_header[3] ^= 1;
  ASSERT_OK_AND_ASSIGN(TensorIndexBuilder b, TensorIndexBuilder::Create(Skeleton(), other_header));
  b.Update(file);
  EXPECT_THAT(b.Finish(), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("header streamed")));
}

TEST(TensorIndexTest, ALayerEndingBeforeItsLastTensorIsDataLoss) {
  ASSERT_OK_AND_ASSIGN(TensorIndexBuilder b, TensorIndexBuilder::Create(Skeleton(), ""));
  b.Update(Pattern(150));
  EXPECT_THAT(b.Finish(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("before tensor model.norm.weight")));
}

TEST(TensorIndexTest, OverlappingTensorsAreRefused) {
  TensorIndex sk = Skeleton();
  sk.tensors[1].offset = 100;
  EXPECT_THAT(TensorIndexBuilder::Create(sk, ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model.norm.weight")));
}

TEST(TensorIndexTest, SerializeParseRoundTripsExactly) {
  ASSERT_OK_AND_ASSIGN(TensorIndex idx, BuildTensorIndex(Skeleton(), Pattern(200)));
  idx.tensors.push_back({"scalar", "F32", {}, 0, 0, {}});
  const std::string bytes = SerializeTensorIndex(idx);
  // Header 88; per tensor 2 + name + 1 + dtype + 1 + 8 * rank + 16 + 32.
  EXPECT_EQ(bytes.size(), 88u + (2 + 18 + 1 + 4 + 1 + 16 + 48) + (2 + 17 + 1 + 3 + 1 + 8 + 48) +
                              (2 + 6 + 1 + 3 + 1 + 0 + 48));
  ASSERT_OK_AND_ASSIGN(TensorIndex back, ParseTensorIndex(bytes));
  EXPECT_EQ(back, idx);
  EXPECT_EQ(SerializeTensorIndex(back), bytes);
}

TEST(TensorIndexTest, ALargeModelsFileStaysSmall) {
  // A 405B shard: 2,000 tensors with names of ~45 bytes and rank 2 is ~240 KB.
  TensorIndex idx;
  idx.file_size = idx.layer_size = 1ull << 40;
  for (int i = 0; i < 2000; ++i) {
    idx.tensors.push_back({"model.layers." + std::to_string(i) + ".self_attn.q_proj.weight",
                           "BF16",
                           {16384, 16384},
                           static_cast<uint64_t>(i) << 29,
                           1ull << 29,
                           {}});
  }
  const std::string bytes = SerializeTensorIndex(idx);
  EXPECT_LT(bytes.size(), 250'000u);
  ASSERT_OK_AND_ASSIGN(TensorIndex back, ParseTensorIndex(bytes));
  EXPECT_EQ(back.tensors.size(), 2000u);
}

TEST(TensorIndexTest, CorruptIndexesAreRefusedNamingTheFault) {
  ASSERT_OK_AND_ASSIGN(TensorIndex idx, BuildTensorIndex(Skeleton(), Pattern(200)));
  const std::string good = SerializeTensorIndex(idx);
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  EXPECT_THAT(ParseTensorIndex(bad_magic), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseTensorIndex(good.substr(0, good.size() - 1)),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("truncated")));
  EXPECT_THAT(ParseTensorIndex(good + "x"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("trailing")));
  // The second tensor's offset (after the first entry) pointing past the file.
  TensorIndex far = idx;
  far.tensors[1].offset = 190;
  EXPECT_THAT(ParseTensorIndex(SerializeTensorIndex(far)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.norm.weight: range [190, +60) is outside the file")));
  TensorIndex twice = idx;
  twice.tensors[1].name = twice.tensors[0].name;
  EXPECT_THAT(ParseTensorIndex(SerializeTensorIndex(twice)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("seen twice")));
  // A count far beyond the bytes is refused before anything is allocated.
  std::string huge = good;
  huge[80] = '\x00';
  huge[82] = '\x01';  // 65,536 tensors
  EXPECT_THAT(ParseTensorIndex(huge), StatusIs(absl::StatusCode::kOutOfRange));
}

TEST(TensorDiffTest, ReportsAddedRemovedChangedAndIdenticalPerFile) {
  auto t = [](std::string name, std::string dtype, std::vector<uint64_t> shape, uint8_t h) {
    TensorEntry e{std::move(name), std::move(dtype), std::move(shape), 0, 0, {}};
    e.hash[0] = h;
    return e;
  };
  std::vector<TensorFileView> a = {
      {"model.safetensors",
       {t("w0", "BF16", {4}, 1), t("w1", "BF16", {4}, 2), t("w2", "BF16", {4}, 3),
        t("w3", "BF16", {4}, 4), t("gone", "F32", {1}, 5)}},
      {"old.safetensors", {t("x", "F32", {1}, 1)}}};
  std::vector<TensorFileView> b = {
      {"model.safetensors",
       {t("w0", "BF16", {4}, 1), t("w1", "BF16", {4}, 9), t("w2", "F16", {4}, 3),
        t("w3", "BF16", {2, 2}, 4), t("new", "F32", {1}, 6)}}};
  const TensorDiff d = DiffTensors(a, b);
  ASSERT_EQ(d.files.size(), 2u);
  const TensorFileDiff& m = d.files[0];
  EXPECT_EQ(m.path, "model.safetensors");
  EXPECT_EQ(m.added, std::vector<std::string>{"new"});
  EXPECT_EQ(m.removed, std::vector<std::string>{"gone"});
  EXPECT_EQ(m.identical, std::vector<std::string>{"w0"});
  ASSERT_EQ(m.changed.size(), 3u);
  EXPECT_TRUE(m.changed[0].digest && !m.changed[0].dtype && !m.changed[0].shape);
  EXPECT_TRUE(m.changed[1].dtype && !m.changed[1].digest);
  EXPECT_TRUE(m.changed[2].shape && !m.changed[2].digest);
  EXPECT_FALSE(d.files[1].in_b);
  EXPECT_EQ(d.files[1].removed, std::vector<std::string>{"x"});
  EXPECT_EQ(d.added, 1u);
  EXPECT_EQ(d.removed, 2u);
  EXPECT_EQ(d.changed, 3u);
  EXPECT_EQ(d.identical, 1u);
  EXPECT_FALSE(d.same());
  EXPECT_TRUE(DiffTensors(a, a).same());
}

}  // namespace
}  // namespace modelfs
