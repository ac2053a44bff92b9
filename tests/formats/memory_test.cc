#include "core/formats/memory.h"

#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/formats/model_shape.h"
#include "tests/formats/memory_test_models.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using json = nlohmann::json;
using ::modelfs::testing::DeepSeekV3;
using ::modelfs::testing::Gemma2_9B;
using ::modelfs::testing::kLlamaParams;
using ::modelfs::testing::Llama31_8B;
using ::modelfs::testing::LlamaRequest;
using ::modelfs::testing::Shape;
using ::modelfs::testing::SmolLM2;

TEST(WeightBytes, Llama8BInQ4KMatchesTheLesson) {
  ASSERT_OK_AND_ASSIGN(uint64_t bytes, WeightBytes(kLlamaParams, "Q4_K"));
  EXPECT_EQ(bytes, 4516875072u);
}

TEST(WeightBytes, CoversTheStandardFormatsExactly) {
  EXPECT_EQ(*WeightBytes(kLlamaParams, "F32"), 32120000000u);
  EXPECT_EQ(*WeightBytes(kLlamaParams, "F16"), 16060000000u);
  EXPECT_EQ(*WeightBytes(kLlamaParams, "BF16"), 16060000000u);
  EXPECT_EQ(*WeightBytes(kLlamaParams, "Q8_0"), 8531875000u);  // 250,937,500 blocks x 34
  EXPECT_EQ(*WeightBytes(kLlamaParams, "Q6_K"), 6587109480u);  // 31,367,188 x 210
  EXPECT_EQ(*WeightBytes(kLlamaParams, "Q5_K"), 5520625088u);  // x 176
  EXPECT_EQ(*WeightBytes(kLlamaParams, "Q5_0"), 5520625000u);  // 250,937,500 x 22
  EXPECT_EQ(*WeightBytes(kLlamaParams, "Q4_0"), 4516875000u);  // x 18
  EXPECT_EQ(*WeightBytes(kLlamaParams, "Q3_K"), 3450390680u);  // 31,367,188 x 110
  EXPECT_EQ(*WeightBytes(kLlamaParams, "Q2_K"), 2634843792u);  // x 84
  EXPECT_EQ(*WeightBytes(kLlamaParams, "FP8"), 8030000000u);
}

TEST(WeightBytes, RoundsAPartialBlockUp) {
  EXPECT_EQ(*WeightBytes(257, "Q4_K"), 288u);
  EXPECT_EQ(*WeightBytes(256, "Q4_K"), 144u);
}

TEST(WeightBytes, AcceptsLowerCaseAndFp8Aliases) {
  EXPECT_EQ(*WeightBytes(1000, "q8_0"), 32u * 34u);
  EXPECT_EQ(*WeightBytes(1000, "f8_e4m3"), 1000u);
}

TEST(WeightBytes, RefusesAFileTypeRecipeWithAHint) {
  EXPECT_THAT(WeightBytes(kLlamaParams, "Q4_K_M"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'Q4_K_M' is a llama.cpp file-type recipe")));
}

TEST(WeightBytes, RefusesAnUnknownFormat) {
  EXPECT_THAT(WeightBytes(1, "Q9_9"), StatusIs(absl::StatusCode::kInvalidArgument,
                                               HasSubstr("unknown weight format 'Q9_9'")));
}

TEST(WeightBytes, RefusesARemovedGgmlType) {
  EXPECT_THAT(WeightBytes(1, "Q4_2"), StatusIs(absl::StatusCode::kInvalidArgument,
                                               HasSubstr("unknown weight format 'Q4_2'")));
}

TEST(WeightBytes, ReportsOverflow) {
  EXPECT_THAT(WeightBytes(std::numeric_limits<uint64_t>::max(), "F32"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overflows")));
}

TEST(StandardWeightFormats, ListsTheTwelveFormatsInOrder) {
  EXPECT_THAT(StandardWeightFormats(), ElementsAre("F32", "F16", "BF16", "Q8_0", "Q6_K", "Q5_K",
                                                   "Q5_0", "Q4_K", "Q4_0", "Q3_K", "Q2_K", "FP8"));
}

TEST(FindKvCacheType, MapsFp8AliasesToOneByte) {
  for (const char* name : {"fp8", "FP8", "f8", "fp8_e4m3", "fp8_e5m2"}) {
    ASSERT_OK_AND_ASSIGN(BlockFormat t, FindKvCacheType(name));
    EXPECT_EQ(t.name, "fp8") << name;
    EXPECT_EQ(t.block_bytes, 1u) << name;
  }
}

TEST(FindKvCacheType, RefusesAWeightOnlyType) {
  EXPECT_THAT(FindKvCacheType("q4_k"), StatusIs(absl::StatusCode::kInvalidArgument,
                                                HasSubstr("unknown kv cache type 'q4_k'")));
}

TEST(KvBytesPerToken, Llama8BIs128KiBInF16) {
  EXPECT_EQ(*KvBytesPerToken(Llama31_8B(), "f16"), 131072u);
  EXPECT_EQ(*KvBytesPerToken(Llama31_8B(), "bf16"), 131072u);
  EXPECT_EQ(*KvBytesPerToken(Llama31_8B(), "f32"), 262144u);
}

TEST(KvBytesPerToken, SmolLM2Is23040BytesInF16) {
  EXPECT_EQ(*KvBytesPerToken(SmolLM2(), "f16"), 23040u);
}

TEST(KvBytesPerToken, Fp8HalvesF16) { EXPECT_EQ(*KvBytesPerToken(Llama31_8B(), "fp8"), 65536u); }

TEST(KvBytesPerToken, Q8_0Costs34BytesPer32Values) {
  EXPECT_EQ(*KvBytesPerToken(Llama31_8B(), "q8_0"), 131072u / 64 * 34);  // 139,264
}

TEST(KvBytesPerToken, Q4_0Costs18BytesPer32Values) {
  EXPECT_EQ(*KvBytesPerToken(Llama31_8B(), "q4_0"), 36864u);
  EXPECT_EQ(*KvBytesPerToken(SmolLM2(), "q4_0"), 30u * 3 * (2 * 18 + 2 * 18));  // 6,480
}

TEST(KvBytesPerToken, BlockTypeRefusesHeadDimThatIsNotAMultiple) {
  ModelShape phi2 = Shape({{"num_hidden_layers", 32},
                           {"num_attention_heads", 32},
                           {"hidden_size", 2560}});  // head dim 80
  EXPECT_THAT(KvBytesPerToken(phi2, "q4_0"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("head_dim_k 80 and head_dim_v 80 must both be multiples")));
  EXPECT_EQ(*KvBytesPerToken(phi2, "f16"), 32u * 32 * 160 * 2);
}

TEST(KvBytesPerToken, MlaCachesOneLatentPerLayer) {
  EXPECT_EQ(*KvBytesPerToken(DeepSeekV3(), "f16"), 61u * 576 * 2);           // 70,272
  EXPECT_EQ(*KvBytesPerToken(DeepSeekV3(), "fp8"), 61u * 576);               // 35,136
  EXPECT_EQ(*KvBytesPerToken(DeepSeekV3(), "q8_0"), 61u * (576 / 32) * 34);  // 37,332
}

TEST(KvBytesPerToken, HybridCountsOnlyAttentionLayers) {
  ModelShape qwen3_next = Shape({{"num_hidden_layers", 48},
                                 {"num_attention_heads", 16},
                                 {"num_key_value_heads", 2},
                                 {"hidden_size", 2048},
                                 {"head_dim", 256},
                                 {"full_attention_interval", 4}});
  EXPECT_EQ(*KvBytesPerToken(qwen3_next, "f16"), 12u * 2 * 512 * 2);  // 24,576
}

TEST(KvBytesPerToken, PerLayerKvHeadsFromGgufAreSummed) {
  ASSERT_OK_AND_ASSIGN(
      ModelShape s,
      ShapeFromGgufMetadata({{"general.architecture", "granitehybrid"},
                             {"granitehybrid.block_count", 5},
                             {"granitehybrid.attention.head_count", 8},
                             {"granitehybrid.attention.head_count_kv", {0, 8, 0, 4, 0}},
                             {"granitehybrid.embedding_length", 512}}));
  EXPECT_EQ(*KvBytesPerToken(s, "f16"), (8u + 4u) * (64 + 64) * 2);  // 3,072
}

TEST(KvBytesPerToken, HandBuiltShapeWithoutPerLayerListUsesKvHeads) {
  ModelShape s;
  s.layers = 2;
  s.kv_heads = 4;
  s.head_dim_k = 64;
  s.head_dim_v = 64;
  EXPECT_EQ(*KvBytesPerToken(s, "f16"), 2u * 4 * 128 * 2);
}

TEST(KvCacheBytes, Llama8BAt32KTimes16Is64GiB) {
  EXPECT_EQ(*KvCacheBytes(Llama31_8B(), "f16", 32768, 16), 68719476736u);
}

TEST(KvCacheBytes, SmolLM2At8KIs180MiB) {
  EXPECT_EQ(*KvCacheBytes(SmolLM2(), "f16", 8192, 1), 188743680u);
}

TEST(KvCacheBytes, ReportsOverflow) {
  EXPECT_THAT(KvCacheBytes(Llama31_8B(), "f16", uint64_t{1} << 40, uint64_t{1} << 20),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overflows")));
}

TEST(KvCacheBytes, HeadlineIgnoresTheSlidingWindow) {
  EXPECT_EQ(*KvCacheBytes(Gemma2_9B(), "f16", 8192, 1), uint64_t{42} * 8 * 512 * 2 * 8192);
}

TEST(WindowedKvCacheBytes, Gemma2CapsHalfTheLayersAtTheWindow) {
  // 21 global layers keep 8,192 tokens, 21 sliding layers keep 4,096.
  ASSERT_OK_AND_ASSIGN(std::optional<uint64_t> w,
                       WindowedKvCacheBytes(Gemma2_9B(), "f16", 8192, 2));
  EXPECT_EQ(w, uint64_t{2} * (172032 * 8192 + 172032 * 4096));
}

TEST(WindowedKvCacheBytes, ContextShorterThanTheWindowEqualsTheHeadline) {
  EXPECT_EQ(**WindowedKvCacheBytes(Gemma2_9B(), "f16", 2048, 1),
            *KvCacheBytes(Gemma2_9B(), "f16", 2048, 1));
}

TEST(WindowedKvCacheBytes, IsAbsentWithoutASlidingWindow) {
  ASSERT_OK_AND_ASSIGN(std::optional<uint64_t> w,
                       WindowedKvCacheBytes(Llama31_8B(), "f16", 8192, 1));
  EXPECT_FALSE(w.has_value());
}

TEST(TokensThatFit, Llama8BQ4KOn24GiBMatchesTheLesson) {
  EXPECT_EQ(TokensThatFit(24, 0.9, 4516875072u, 131072u), 142486u);
}

TEST(TokensThatFit, IsZeroWhenTheWeightsDoNotFit) {
  EXPECT_EQ(TokensThatFit(8, 0.9, 16060000000u, 131072u), 0u);
}

TEST(TokensThatFit, IsUnboundedWithoutAKvCache) {
  EXPECT_EQ(TokensThatFit(24, 0.9, 1000, 0), std::numeric_limits<uint64_t>::max());
}

TEST(SequencesThatFit, Llama8BFitsFourSequencesOf32K) {
  EXPECT_EQ(SequencesThatFit(24, 0.9, 4516875072u, uint64_t{131072} * 32768), 4u);
}

TEST(KvBudgetBytes, SubtractsWeightsFromTheUsableShare) {
  EXPECT_EQ(KvBudgetBytes(24, 0.9, 4516875072u), 18675948326u);
  EXPECT_EQ(KvBudgetBytes(1, 0.9, uint64_t{1} << 40), 0u);
}

TEST(ParseParamCount, ReadsScientificAndSuffixedCounts) {
  EXPECT_EQ(*ParseParamCount("8.03e9"), kLlamaParams);
  EXPECT_EQ(*ParseParamCount("8030000000"), kLlamaParams);
  EXPECT_EQ(*ParseParamCount("8.03B"), kLlamaParams);
  EXPECT_EQ(*ParseParamCount("134.5M"), 134500000u);
  EXPECT_EQ(*ParseParamCount("950k"), 950000u);
}

TEST(ParseParamCount, RefusesGarbageByName) {
  EXPECT_THAT(ParseParamCount("eight"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("parameter count 'eight'")));
  EXPECT_THAT(ParseParamCount("-5"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("-5")));
  EXPECT_THAT(ParseParamCount("8e9x"), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  EXPECT_THAT(ParseParamCount(""), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  EXPECT_THAT(ParseParamCount("1e40"), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

TEST(ComputeMemoryReport, Llama8BMatchesTheLessonFigures) {
  ASSERT_OK_AND_ASSIGN(MemoryReport r, ComputeMemoryReport(LlamaRequest()));
  ASSERT_EQ(r.weights.size(), 1u);
  EXPECT_EQ(r.weights[0].format, "Q4_K");
  EXPECT_EQ(r.weights[0].bytes, 4516875072u);
  ASSERT_EQ(r.kv.size(), 1u);
  EXPECT_EQ(r.kv[0].bytes_per_token, 131072u);
  EXPECT_EQ(r.kv[0].bytes, 68719476736u);
  ASSERT_EQ(r.fits.size(), 1u);
  EXPECT_EQ(r.fits[0].tokens, 142486u);
  EXPECT_EQ(r.fits[0].sequences, 4u);
  EXPECT_TRUE(r.fits[0].weights_fit);
  EXPECT_FALSE(r.fits[0].request_fits);
  EXPECT_EQ(r.gpu_usable_bytes, 23192823398u);
}

TEST(ComputeMemoryReport, DefaultsCtxToTheTrainedContext) {
  MemoryRequest req;
  req.shape = SmolLM2();
  ASSERT_OK_AND_ASSIGN(MemoryReport r, ComputeMemoryReport(req));
  EXPECT_EQ(r.ctx, 8192u);
  EXPECT_EQ(r.kv[0].bytes, 188743680u);
  EXPECT_TRUE(r.fits.empty());
}

TEST(ComputeMemoryReport, WithoutAnyContextLengthIsRefused) {
  MemoryRequest req;
  req.shape = Llama31_8B();
  EXPECT_THAT(ComputeMemoryReport(req),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no context length")));
}

TEST(ComputeMemoryReport, QuantsWithoutParamsAreRefused) {
  MemoryRequest req = LlamaRequest();
  req.params.reset();
  EXPECT_THAT(ComputeMemoryReport(req), StatusIs(absl::StatusCode::kInvalidArgument,
                                                 HasSubstr("Q4_K need a parameter count")));
}

TEST(ComputeMemoryReport, UtilizationAboveOneIsRefused) {
  MemoryRequest req = LlamaRequest();
  req.utilization = 1.5;
  EXPECT_THAT(ComputeMemoryReport(req), StatusIs(absl::StatusCode::kInvalidArgument,
                                                 HasSubstr("utilization 1.5 is outside (0, 1]")));
}

TEST(ComputeMemoryReport, ZeroSequencesAreRefused) {
  MemoryRequest req = LlamaRequest();
  req.seqs = 0;
  EXPECT_THAT(ComputeMemoryReport(req), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

TEST(ComputeMemoryReport, UnknownKvTypeIsRefused) {
  MemoryRequest req = LlamaRequest();
  req.kv_types = {"int3"};
  EXPECT_THAT(ComputeMemoryReport(req), StatusIs(absl::StatusCode::kInvalidArgument,
                                                 HasSubstr("unknown kv cache type 'int3'")));
}

TEST(ComputeMemoryReport, ParamsAloneSizeEveryStandardFormat) {
  MemoryRequest req = LlamaRequest();
  req.quants.clear();
  ASSERT_OK_AND_ASSIGN(MemoryReport r, ComputeMemoryReport(req));
  ASSERT_EQ(r.weights.size(), 12u);
  EXPECT_EQ(r.weights[7].format, "Q4_K");
  EXPECT_EQ(r.weights[7].bytes, 4516875072u);
  EXPECT_EQ(r.fits.size(), 12u);
  EXPECT_FALSE(r.fits[0].weights_fit);  // F32: 32 GB on a 24 GiB card
  EXPECT_EQ(r.fits[0].tokens, 0u);
}

TEST(ComputeMemoryReport, EmptyKvTypeListSizesEveryStandardType) {
  MemoryRequest req = LlamaRequest();
  req.kv_types.clear();
  ASSERT_OK_AND_ASSIGN(MemoryReport r, ComputeMemoryReport(req));
  ASSERT_EQ(r.kv.size(), 6u);
  EXPECT_EQ(r.kv[2].kv_type, "fp8");
  EXPECT_EQ(r.kv[2].bytes_per_token, 65536u);
  EXPECT_EQ(r.fits.size(), 6u);
}

TEST(ComputeMemoryReport, FileBytesAreFitAndQuantTableIsNot) {
  MemoryRequest req = LlamaRequest();
  req.quants.clear();
  req.file_tensor_bytes = 4920734720u;
  req.file_label = "model.gguf";
  ASSERT_OK_AND_ASSIGN(MemoryReport r, ComputeMemoryReport(req));
  ASSERT_EQ(r.weights.size(), 13u);
  EXPECT_TRUE(r.weights[0].from_file);
  EXPECT_NEAR(*r.weights[0].bits_per_weight, 4.9023, 1e-4);
  ASSERT_EQ(r.fits.size(), 1u);
  EXPECT_EQ(r.fits[0].weights, "model.gguf");
  EXPECT_EQ(r.fits[0].tokens, (23192823398u - 4920734720u) / 131072u);
}

TEST(ComputeMemoryReport, WindowedSequencesCountMoreThanTheHeadline) {
  MemoryRequest req;
  req.shape = Gemma2_9B();
  req.params = 9241705984;
  req.quants = {"Q8_0"};
  req.gpu_gib = 24;
  ASSERT_OK_AND_ASSIGN(MemoryReport r, ComputeMemoryReport(req));
  ASSERT_EQ(r.fits.size(), 1u);
  ASSERT_TRUE(r.fits[0].windowed_sequences.has_value());
  EXPECT_EQ(r.fits[0].sequences, r.fits[0].kv_budget_bytes / (uint64_t{344064} * 8192));
  EXPECT_EQ(*r.fits[0].windowed_sequences, r.fits[0].kv_budget_bytes / 2113929216u);
}

TEST(ComputeMemoryReport, NotesACtxBeyondTheTrainedContext) {
  MemoryRequest req;
  req.shape = SmolLM2();
  req.ctx = 16384;
  ASSERT_OK_AND_ASSIGN(MemoryReport r, ComputeMemoryReport(req));
  EXPECT_THAT(r.notes, ::testing::Contains(
                           "ctx 16,384 is longer than the model's trained context of 8,192"));
}

}  // namespace
}  // namespace modelfs
