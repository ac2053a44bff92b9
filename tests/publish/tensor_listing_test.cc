#include "core/publish/tensor_listing.h"

#include <string>

#include "core/formats/gguf_writer.h"
#include "core/formats/safetensors.h"
#include "core/status/status_macros.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;

std::string Bytes(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 31 + seed * 17) & 0xff);
  return s;
}

ChunkHash Blake3(std::string_view b) { return HashChunkBytes(ChunkDigestAlgorithm::kBlake3, b); }

// The index of a file in memory, built as push builds it: header parsed, bytes streamed.
absl::StatusOr<TensorIndex> IndexOf(const std::string& file, const std::string& path) {
  auto reader = MakeMemoryRangeReaderView(path, file);
  ASSIGN_OR_RETURN(std::optional<TensorSkeleton> s,
                   ReadTensorSkeleton(*reader, path, Digest::Of(file), file.size(), 0));
  if (!s) return absl::NotFoundError("not a weight file");
  ASSIGN_OR_RETURN(TensorIndexBuilder b,
                   TensorIndexBuilder::Create(std::move(s->index), std::move(s->header)));
  for (size_t at = 0; at < file.size(); at += 1000)
    b.Update(std::string_view(file).substr(at, 1000));
  return b.Finish();
}

TEST(TensorListingTest, ASafetensorsFilesTensorsAreListedWithOffsetsInTheFileAndHashed) {
  SafetensorsWriter w;
  ASSERT_OK(w.AddTensor("a.weight", "BF16", {4, 8}, Bytes(64, 1)));
  ASSERT_OK(w.AddTensor("b.bias", "F32", {8}, Bytes(32, 2)));
  const std::string file = w.Serialize();
  const uint64_t data_start = w.SerializeHeader().size();
  ASSERT_OK_AND_ASSIGN(TensorIndex idx, IndexOf(file, "model.safetensors"));
  EXPECT_EQ(idx.format, TensorFileFormat::kSafetensors);
  EXPECT_EQ(idx.file_size, file.size());
  ASSERT_EQ(idx.tensors.size(), 2u);
  for (const TensorEntry& t : idx.tensors) {
    EXPECT_GE(t.offset, data_start) << t.name;
    EXPECT_EQ(t.hash, Blake3(std::string_view(file).substr(t.offset, t.length))) << t.name;
  }
  const TensorEntry& a = idx.tensors[0].name == "a.weight" ? idx.tensors[0] : idx.tensors[1];
  EXPECT_EQ(a.dtype, "BF16");
  EXPECT_EQ(a.shape, (std::vector<uint64_t>{4, 8}));
  EXPECT_EQ(a.length, 64u);
  EXPECT_EQ(a.hash, Blake3(Bytes(64, 1)));
}

TEST(TensorListingTest, AGgufFilesTensorsCarryTheGgmlTypeAndAbsoluteOffsets) {
  GgufWriter g;
  g.Set("general.architecture", GgufValue::String("llama"));
  ASSERT_OK(g.AddTensor("token_embd.weight", {8, 2}, /*F32*/ 0, Bytes(64, 3)));
  ASSERT_OK(g.AddTensor("output_norm.weight", {8}, /*F32*/ 0, Bytes(32, 4)));
  ASSERT_OK_AND_ASSIGN(std::string file, g.Serialize());
  ASSERT_OK_AND_ASSIGN(TensorIndex idx, IndexOf(file, "model.gguf"));
  EXPECT_EQ(idx.format, TensorFileFormat::kGguf);
  ASSERT_EQ(idx.tensors.size(), 2u);
  EXPECT_EQ(idx.tensors[0].name, "token_embd.weight");
  EXPECT_EQ(idx.tensors[0].dtype, "F32");
  EXPECT_EQ(idx.tensors[0].shape, (std::vector<uint64_t>{8, 2}));
  EXPECT_EQ(idx.tensors[0].hash, Blake3(Bytes(64, 3)));
  EXPECT_EQ(idx.tensors[1].hash, Blake3(Bytes(32, 4)));
  ASSERT_OK_AND_ASSIGN(uint64_t header, g.HeaderSize());
  EXPECT_EQ(idx.tensors[0].offset, header);
}

TEST(TensorListingTest, AFileThatIsNoWeightFileHasNoListing) {
  auto reader = MakeMemoryRangeReaderView("README.md", "# hi\n");
  ASSERT_OK_AND_ASSIGN(std::optional<TensorSkeleton> s,
                       ReadTensorSkeleton(*reader, "README.md", Digest::Of("x"), 5, 0));
  EXPECT_FALSE(s.has_value());
}

TEST(TensorListingTest, AMalformedHeaderIsTheParsersError) {
  auto reader = MakeMemoryRangeReaderView("bad.safetensors", std::string(16, '\xff'));
  EXPECT_THAT(ReadTensorSkeleton(*reader, "bad.safetensors", Digest::Of("x"), 16, 0),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(TensorListingTest, DiffJsonSaysWhatChangedAndSummarises) {
  ModelTensors a, b;
  TensorEntry t{"w", "BF16", {2}, 0, 4, {}};
  a.files.push_back({"m.safetensors", Digest::Of("a"), TensorSource::kIndex, {}, {}});
  a.files[0].index.tensors = {t};
  t.hash[0] = 1;
  b.files.push_back({"m.safetensors", Digest::Of("b"), TensorSource::kIndex, {}, {}});
  b.files[0].index.tensors = {t};
  const nlohmann::json j = TensorDiffToJson(DiffModelTensors(a, b));
  EXPECT_EQ(j["summary"]["changed"], 1);
  EXPECT_EQ(j["summary"]["same"], false);
  EXPECT_EQ(j["files"][0]["changed"][0]["what"], nlohmann::json({"digest"}));
  EXPECT_EQ(j["files"][0]["changed"][0]["b"]["digest"], "blake3:01" + std::string(62, '0'));
}

}  // namespace
}  // namespace modelfs

namespace modelfs {
namespace {

// An index holds only names ParseTensorIndex takes back: a GGUF's names need not be UTF-8.
TEST(TensorListingTest, AGgufTensorNameThatIsNotUtf8IsRefusedNamingTheFile) {
  GgufWriter g;
  g.Set("general.architecture", GgufValue::String("llama"));
  ASSERT_OK(g.AddTensor("bad\xff.weight", {8}, /*F32*/ 0, std::string(32, 'x')));
  ASSERT_OK_AND_ASSIGN(std::string file, g.Serialize());
  auto reader = MakeMemoryRangeReaderView("model.gguf", file);
  EXPECT_THAT(ReadTensorSkeleton(*reader, "model.gguf", Digest::Of(file), file.size(), 0).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("model.gguf")));
}

}  // namespace
}  // namespace modelfs
