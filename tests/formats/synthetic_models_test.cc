// The synthetic models reproduce the shapes and figures of the real files they stand for.
#include "testsupport/synth/synthetic_models.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <map>
#include <set>
#include <string>

#include "core/formats/dequant.h"
#include "core/formats/gguf.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

using ::modelfs::testing::TempDir;
using ::testing::ElementsAre;

struct TypeTotals {
  uint64_t tensors = 0, parameters = 0, bytes = 0;
};

std::map<std::string, TypeTotals> ByType(const GgufFile& f) {
  std::map<std::string, TypeTotals> out;
  for (const GgufTensor& t : f.tensors) {
    TypeTotals& s = out[t.type->name];
    ++s.tensors;
    s.parameters += t.elements;
    s.bytes += t.nbytes;
  }
  return out;
}

// One sparse file shared by the tests below (writing and parsing 49152 tokens takes a while).
class SmolLm2SparseTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    path_ = new std::string(dir_->Join("SmolLM2-135M-Instruct-Q8_0.gguf"));
    ASSERT_OK(WriteSmolLm2Q8Gguf(*path_, /*sparse_data=*/true));
    ASSERT_OK_AND_ASSIGN(auto reader, OpenFileRangeReader(*path_));
    ASSERT_OK_AND_ASSIGN(GgufFile file, ParseGguf(*reader));
    parsed_ = new GgufFile(std::move(file));
  }
  static void TearDownTestSuite() {
    delete parsed_;
    delete path_;
    delete dir_;
  }
  void SetUp() override {
    ASSERT_NE(parsed_, nullptr);
    path_ref_ = *path_;
    file_ = *parsed_;
  }

  static TempDir* dir_;
  static std::string* path_;
  static GgufFile* parsed_;
  std::string path_ref_;
  GgufFile file_;
};
TempDir* SmolLm2SparseTest::dir_ = nullptr;
std::string* SmolLm2SparseTest::path_ = nullptr;
GgufFile* SmolLm2SparseTest::parsed_ = nullptr;

TEST_F(SmolLm2SparseTest, HasTheLessonsTensorCountAndParameters) {
  EXPECT_EQ(file_.version, 3u);
  EXPECT_EQ(file_.tensors.size(), 272u);
  EXPECT_EQ(file_.TotalElements(), 134515008u);
  EXPECT_EQ(file_.TotalTensorBytes(), 143025408u);
}

TEST_F(SmolLm2SparseTest, SplitsIntoQ8_0AndF32ExactlyAsTheLessonPrints) {
  auto by_type = ByType(file_);
  ASSERT_EQ(by_type.size(), 2u);
  EXPECT_EQ(by_type["Q8_0"].tensors, 211u);
  EXPECT_EQ(by_type["Q8_0"].parameters, 134479872u);
  EXPECT_EQ(by_type["Q8_0"].bytes, 142884864u);
  EXPECT_EQ(by_type["F32"].tensors, 61u);
  EXPECT_EQ(by_type["F32"].parameters, 35136u);
  EXPECT_EQ(by_type["F32"].bytes, 140544u);
}

TEST_F(SmolLm2SparseTest, FileIsHeaderPlusTensorsWithNoPadding) {
  struct stat st;
  ASSERT_EQ(stat(path_ref_.c_str(), &st), 0);
  EXPECT_EQ(file_.file_size, static_cast<uint64_t>(st.st_size));
  EXPECT_EQ(file_.PaddingBytes(), 0u);
  EXPECT_EQ(file_.file_size, file_.data_offset + 143025408u);
  // Sparse: the 143 MB of tensor data take no disk blocks.
  EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, 8u << 20);
}

TEST_F(SmolLm2SparseTest, TensorShapesListTheRowLengthFirst) {
  EXPECT_THAT(file_.FindTensor("token_embd.weight")->dims, ElementsAre(576u, 49152u));
  EXPECT_EQ(file_.FindTensor("token_embd.weight")->nbytes, 30081024u);
  EXPECT_THAT(file_.FindTensor("blk.0.attn_k.weight")->dims, ElementsAre(576u, 192u));
  EXPECT_THAT(file_.FindTensor("blk.29.ffn_down.weight")->dims, ElementsAre(1536u, 576u));
  EXPECT_THAT(file_.FindTensor("blk.7.attn_norm.weight")->dims, ElementsAre(576u));
  EXPECT_EQ(file_.FindTensor("output.weight"), nullptr);  // tied embeddings
}

TEST_F(SmolLm2SparseTest, MetadataUsesLlamaCppKeys) {
  EXPECT_EQ(file_.Architecture(), "llama");
  EXPECT_EQ(file_.GetUint("llama.block_count"), 30u);
  EXPECT_EQ(file_.GetUint("llama.embedding_length"), 576u);
  EXPECT_EQ(file_.GetUint("llama.attention.head_count"), 9u);
  EXPECT_EQ(file_.GetUint("llama.attention.head_count_kv"), 3u);
  EXPECT_EQ(file_.GetUint("llama.context_length"), 8192u);
  EXPECT_EQ(file_.GetUint("llama.feed_forward_length"), 1536u);
  EXPECT_EQ(file_.GetUint("llama.vocab_size"), 49152u);
  EXPECT_EQ(file_.GetUint("general.file_type"), 7u);
  EXPECT_EQ(file_.GetArrayLength("tokenizer.ggml.tokens"), 49152u);
  EXPECT_EQ(file_.Find("llama.block_count")->type_name(), std::string("UINT32"));
  nlohmann::json j = file_.MetadataJson();
  EXPECT_EQ(j["tokenizer.ggml.tokens_count"].get<uint64_t>(), 49152u);
  EXPECT_EQ(j["llama.attention.head_count_kv"].get<uint64_t>(), 3u);
}

TEST(TinyLlamaTest, HoldsRealWeightsInSeveralTypes) {
  TempDir dir;
  const std::string path = dir.Join("tiny.gguf");
  ASSERT_OK(WriteTinyLlamaGguf(path));
  ASSERT_OK_AND_ASSIGN(auto reader, OpenFileRangeReader(path));
  ASSERT_OK_AND_ASSIGN(GgufFile f, ParseGguf(*reader));
  auto by_type = ByType(f);
  EXPECT_EQ(by_type["F16"].tensors, 2u);
  EXPECT_EQ(by_type["Q8_0"].tensors, 16u);
  EXPECT_EQ(by_type["Q4_0"].tensors, 12u);
  EXPECT_EQ(by_type["F32"].tensors, 9u);
  EXPECT_EQ(f.tensors.size(), 39u);
  EXPECT_GT(f.file_size, 2u << 20);
  EXPECT_LT(f.file_size, 8u << 20);
  // The first embedding values are the PRNG's, rounded to f16.
  const std::vector<float> expected = SyntheticWeights(42, 0, 8, 0.02f);
  ASSERT_OK_AND_ASSIGN(std::vector<float> peek, PeekValues(*reader, f, "token_embd.weight", 8));
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(peek[i], HalfToFloat(FloatToHalf(expected[i])));
  ASSERT_OK_AND_ASSIGN(std::vector<float> norm,
                       PeekValues(*reader, f, "blk.0.attn_norm.weight", 4));
  for (float x : norm) EXPECT_NEAR(x, 1.0f, 0.3f);
}

TEST(TinyLlamaTest, IsDeterministic) {
  ASSERT_OK_AND_ASSIGN(GgufWriter a, MakeTinyLlamaWriter());
  ASSERT_OK_AND_ASSIGN(GgufWriter b, MakeTinyLlamaWriter());
  ASSERT_OK_AND_ASSIGN(std::string x, a.Serialize());
  ASSERT_OK_AND_ASSIGN(std::string y, b.Serialize());
  EXPECT_EQ(x, y);
}

TEST(TinyLlamaTest, VersionTwoIsWrittenOnRequest) {
  TinyLlamaSpec spec;
  spec.version = 2;
  spec.layers = 1;
  ASSERT_OK_AND_ASSIGN(GgufWriter w, MakeTinyLlamaWriter(spec));
  ASSERT_OK_AND_ASSIGN(std::string bytes, w.Serialize());
  auto reader = MakeMemoryRangeReader("tiny-v2.gguf", bytes);
  ASSERT_OK_AND_ASSIGN(GgufFile f, ParseGguf(*reader));
  EXPECT_EQ(f.version, 2u);
  EXPECT_EQ(f.GetUint("llama.block_count"), 1u);
}

TEST(LlamaCppModelTest, HasTheKeysLlamaCppsLoaderRequires) {
  ASSERT_OK_AND_ASSIGN(GgufWriter w, MakeLlamaCppWriter());
  ASSERT_OK_AND_ASSIGN(std::string bytes, w.Serialize());
  auto reader = MakeMemoryRangeReader("llama.gguf", bytes);
  ASSERT_OK_AND_ASSIGN(GgufFile f, ParseGguf(*reader));
  EXPECT_EQ(f.GetString("general.architecture"), "llama");
  EXPECT_EQ(f.GetUint("llama.block_count"), 4u);
  EXPECT_EQ(f.GetUint("llama.embedding_length"), 256u);
  EXPECT_EQ(f.GetUint("llama.feed_forward_length"), 768u);
  EXPECT_EQ(f.GetUint("llama.attention.head_count"), 8u);
  EXPECT_EQ(f.GetUint("llama.attention.head_count_kv"), 4u);
  EXPECT_EQ(f.GetUint("llama.rope.dimension_count"), 32u);
  EXPECT_EQ(f.GetString("tokenizer.ggml.model"), "llama");
  EXPECT_NE(f.Find("llama.attention.layer_norm_rms_epsilon"), nullptr);
  EXPECT_NE(f.Find("tokenizer.ggml.scores"), nullptr);
  EXPECT_NE(f.Find("tokenizer.ggml.token_type"), nullptr);
  EXPECT_EQ(f.GetUint("tokenizer.ggml.bos_token_id"), 1u);
  EXPECT_EQ(f.GetUint("tokenizer.ggml.eos_token_id"), 2u);
}

TEST(LlamaCppModelTest, VocabularyHasByteTokensAndDistinctPieces) {
  ASSERT_OK_AND_ASSIGN(GgufWriter w, MakeLlamaCppWriter());
  ASSERT_OK_AND_ASSIGN(std::string bytes, w.Serialize());
  auto reader = MakeMemoryRangeReader("llama.gguf", bytes);
  ASSERT_OK_AND_ASSIGN(GgufFile f, ParseGguf(*reader));
  const GgufValue* tokens = f.Find("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  const auto& items = std::get<GgufArray>(tokens->v).items;
  ASSERT_EQ(items.size(), 512u);
  EXPECT_EQ(std::get<std::string>(items[0].v), "<unk>");
  EXPECT_EQ(std::get<std::string>(items[3 + 0x0A].v), "<0x0A>");
  EXPECT_EQ(std::get<std::string>(items[259].v), "\xe2\x96\x81");
  std::set<std::string> distinct;
  for (const GgufValue& v : items) distinct.insert(std::get<std::string>(v.v));
  EXPECT_EQ(distinct.size(), 512u);
}

TEST(LlamaCppModelTest, MatricesAreInTheRequestedType) {
  for (const auto& [type_id, name] :
       std::vector<std::pair<uint32_t, std::string>>{{1, "F16"}, {8, "Q8_0"}, {12, "Q4_K"}}) {
    LlamaCppSpec spec;
    spec.weight_type = type_id;
    spec.layers = 1;
    ASSERT_OK_AND_ASSIGN(GgufWriter w, MakeLlamaCppWriter(spec));
    ASSERT_OK_AND_ASSIGN(std::string bytes, w.Serialize());
    auto reader = MakeMemoryRangeReader("llama.gguf", bytes);
    ASSERT_OK_AND_ASSIGN(GgufFile f, ParseGguf(*reader));
    auto by_type = ByType(f);
    // 7 matrices per layer plus output.weight; token_embd is F16 in every variant.
    EXPECT_EQ(by_type[name].tensors, type_id == 1 ? 9u : 8u) << name;
    EXPECT_EQ(by_type["F32"].tensors, 3u) << name;
    EXPECT_EQ(f.tensors.size(), 12u) << name;
  }
}

TEST(LlamaCppModelTest, RejectsAQ4_KRowThatIsNotAWholeSuperBlock) {
  LlamaCppSpec spec;
  spec.weight_type = 12;
  spec.embedding = 128;
  spec.heads = 4;
  spec.kv_heads = 2;
  EXPECT_THAT(MakeLlamaCppWriter(spec).status(),
              ::modelfs::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                           ::testing::HasSubstr("multiples of 256 for Q4_K")));
}

TEST(LlamaCppModelTest, LayersForSizeLandsNearTheTarget) {
  LlamaCppSpec spec;
  ASSERT_OK_AND_ASSIGN(uint32_t layers, LlamaCppLayersForSize(spec, 32ull << 20));
  spec.layers = layers;
  ASSERT_OK_AND_ASSIGN(GgufWriter w, MakeLlamaCppWriter(spec));
  ASSERT_OK_AND_ASSIGN(uint64_t size, w.FileSize());
  EXPECT_NEAR(static_cast<double>(size), 32.0 * (1 << 20), 0.6 * 1024 * 1024);
}

TEST(SyntheticWeightsTest, HaveTheRequestedSpread) {
  const std::vector<float> w = SyntheticWeights(1, 2, 100000, 0.02f);
  double sum = 0, sq = 0;
  for (float x : w) {
    sum += x;
    sq += static_cast<double>(x) * x;
  }
  const double mean = sum / w.size();
  EXPECT_NEAR(mean, 0.0, 0.001);
  EXPECT_NEAR(std::sqrt(sq / w.size() - mean * mean), 0.02, 0.001);
}

}  // namespace
}  // namespace modelfs
