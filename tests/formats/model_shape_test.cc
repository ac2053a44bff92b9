#include "core/formats/model_shape.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using json = nlohmann::json;

// The published config.json numbers of the models the tests stand for.
json Llama31_8B() {
  return {{"model_type", "llama"},     {"num_hidden_layers", 32},
          {"num_attention_heads", 32}, {"num_key_value_heads", 8},
          {"hidden_size", 4096},       {"max_position_embeddings", 131072},
          {"vocab_size", 128256}};
}

json DeepSeekV3() {
  return {{"model_type", "deepseek_v3"},
          {"num_hidden_layers", 61},
          {"num_attention_heads", 128},
          {"num_key_value_heads", 128},
          {"hidden_size", 7168},
          {"kv_lora_rank", 512},
          {"q_lora_rank", 1536},
          {"qk_rope_head_dim", 64},
          {"qk_nope_head_dim", 128},
          {"v_head_dim", 128},
          {"max_position_embeddings", 163840},
          {"vocab_size", 129280}};
}

json Gemma2_9B() {
  return {{"model_type", "gemma2"},    {"num_hidden_layers", 42},
          {"num_attention_heads", 16}, {"num_key_value_heads", 8},
          {"hidden_size", 3584},       {"head_dim", 256},
          {"sliding_window", 4096},    {"max_position_embeddings", 8192},
          {"vocab_size", 256000}};
}

json SmolLM2Gguf() {
  return {{"general.architecture", "llama"},     {"llama.block_count", 30},
          {"llama.attention.head_count", 9},     {"llama.attention.head_count_kv", 3},
          {"llama.embedding_length", 576},       {"llama.context_length", 8192},
          {"tokenizer.ggml.tokens_count", 49152}};
}

TEST(ShapeFromConfigJson, ReadsLlama31Numbers) {
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromConfigJson(Llama31_8B()));
  EXPECT_EQ(s.architecture, "llama");
  EXPECT_EQ(s.layers, 32u);
  EXPECT_EQ(s.heads, 32u);
  EXPECT_EQ(s.kv_heads, 8u);
  EXPECT_EQ(s.head_dim_k, 128u);
  EXPECT_EQ(s.head_dim_v, 128u);
  EXPECT_EQ(s.hidden, 4096u);
  EXPECT_EQ(s.context, 131072u);
  EXPECT_EQ(s.vocab, 128256u);
  EXPECT_EQ(s.attention_layers, 32u);
  EXPECT_EQ(s.kv_heads_per_layer, std::vector<uint64_t>(32, 8));
  EXPECT_EQ(s.layer_types, std::vector<std::string>(32, "full_attention"));
  EXPECT_FALSE(s.sliding_window.has_value());
  EXPECT_FALSE(s.mla);
  EXPECT_TRUE(s.notes.empty());
}

TEST(ShapeFromConfigJson, LeavesContextAndVocabZeroWhenAbsent) {
  json c = {{"num_hidden_layers", 32},
            {"num_attention_heads", 32},
            {"num_key_value_heads", 8},
            {"hidden_size", 4096}};
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromConfigJson(c));
  EXPECT_EQ(s.context, 0u);
  EXPECT_EQ(s.vocab, 0u);
  EXPECT_EQ(s.architecture, "");
}

TEST(ShapeFromConfigJson, KvHeadsDefaultToAttentionHeads) {
  json c = {{"num_hidden_layers", 6}, {"num_attention_heads", 8}, {"hidden_size", 512}};
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromConfigJson(c));
  EXPECT_EQ(s.kv_heads, 8u);
  EXPECT_EQ(s.head_dim_k, 64u);
}

TEST(ShapeFromConfigJson, MultiQueryMeansOneKvHead) {
  json c = {{"n_layer", 32},
            {"n_head", 71},
            {"n_embd", 4544},
            {"multi_query", true},
            {"model_type", "falcon"}};
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromConfigJson(c));
  EXPECT_EQ(s.layers, 32u);
  EXPECT_EQ(s.kv_heads, 1u);
  EXPECT_EQ(s.head_dim_k, 64u);
}

TEST(ShapeFromConfigJson, ExplicitHeadDimWinsOverHiddenDividedByHeads) {
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromConfigJson(Gemma2_9B()));
  EXPECT_EQ(s.head_dim_k, 256u);  // 3584 / 16 would be 224
  EXPECT_EQ(s.head_dim_v, 256u);
}

TEST(ShapeFromConfigJson, NullHeadDimFallsBackToHiddenDividedByHeads) {
  json c = Llama31_8B();
  c["head_dim"] = nullptr;
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromConfigJson(c));
  EXPECT_EQ(s.head_dim_k, 128u);
}

TEST(ShapeFromConfigJson, DeepSeekV3UsesLatentAttention) {
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromConfigJson(DeepSeekV3()));
  EXPECT_TRUE(s.mla);
  EXPECT_EQ(s.mla_kv_dim, 576u);
  EXPECT_EQ(s.kv_lora_rank, 512u);
  EXPECT_EQ(s.rope_head_dim, 64u);
  EXPECT_EQ(s.head_dim_k, 192u);
  EXPECT_EQ(s.head_dim_v, 128u);
  EXPECT_EQ(s.attention_layers, 61u);
  ASSERT_EQ(s.notes.size(), 1u);
  EXPECT_THAT(s.notes[0], HasSubstr("MLA: each layer caches one latent of 576 values"));
}

TEST(ShapeFromConfigJson, MlaWithoutRopeHeadDimNamesTheKey) {
  json c = DeepSeekV3();
  c.erase("qk_rope_head_dim");
  EXPECT_THAT(ShapeFromConfigJson(c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("qk_rope_head_dim")));
}

TEST(ShapeFromConfigJson, MlaLatentThatOverflowsIsRejected) {
  json c = DeepSeekV3();
  c["kv_lora_rank"] = 18446744073709551615ULL;
  EXPECT_THAT(ShapeFromConfigJson(c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("kv_lora_rank 18446744073709551615 + qk_rope_head_dim 64 "
                                 "overflows")));
}

TEST(ShapeFromConfigJson, LayerTypesMarkLinearAttentionLayersWithoutCache) {
  json c = {{"model_type", "qwen3_next"}, {"num_hidden_layers", 8}, {"num_attention_heads", 16},
            {"num_key_value_heads", 2},   {"hidden_size", 2048},    {"head_dim", 256}};
  c["layer_types"] = {"linear_attention", "linear_attention", "linear_attention", "full_attention",
                      "linear_attention", "linear_attention", "linear_attention", "full_attention"};
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromConfigJson(c));
  EXPECT_EQ(s.attention_layers, 2u);
  EXPECT_THAT(s.kv_heads_per_layer, ElementsAre(0, 0, 0, 2, 0, 0, 0, 2));
  ASSERT_EQ(s.notes.size(), 1u);
  EXPECT_THAT(s.notes[0], HasSubstr("hybrid model: 2 of 8 layers hold a KV cache; the other 6 "
                                    "(6 linear_attention)"));
}

TEST(ShapeFromConfigJson, FullAttentionIntervalBuildsQwen3NextLayout) {
  json c = {{"model_type", "qwen3_next"},  {"num_hidden_layers", 48}, {"num_attention_heads", 16},
            {"num_key_value_heads", 2},    {"hidden_size", 2048},     {"head_dim", 256},
            {"full_attention_interval", 4}};
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromConfigJson(c));
  EXPECT_EQ(s.attention_layers, 12u);
  EXPECT_EQ(s.layer_types[3], "full_attention");
  EXPECT_EQ(s.layer_types[4], "linear_attention");
}

TEST(ShapeFromConfigJson, HybridOverridePatternCountsOnlyStarLayers) {
  json c = {{"model_type", "nemotron_h"}, {"num_hidden_layers", 8},
            {"num_attention_heads", 32},  {"num_key_value_heads", 8},
            {"hidden_size", 4096},        {"hybrid_override_pattern", "M-M*-M-E"}};
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromConfigJson(c));
  EXPECT_EQ(s.attention_layers, 1u);
  EXPECT_THAT(s.layer_types,
              ElementsAre("mamba", "mlp", "mamba", "attention", "mlp", "mamba", "mlp", "moe"));
  EXPECT_THAT(s.notes[0], HasSubstr("(3 mamba, 3 mlp, 1 moe)"));
}

TEST(ShapeFromConfigJson, HybridOverridePatternOfWrongLengthIsRejected) {
  json c = {{"num_hidden_layers", 8},
            {"num_attention_heads", 32},
            {"hidden_size", 4096},
            {"hybrid_override_pattern", "M*"}};
  EXPECT_THAT(
      ShapeFromConfigJson(c),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("hybrid_override_pattern has 2 layers but num_hidden_layers is 8")));
}

TEST(ShapeFromConfigJson, JambaPeriodAndOffsetPickAttentionLayers) {
  json c = {{"model_type", "jamba"},    {"num_hidden_layers", 32}, {"num_attention_heads", 32},
            {"num_key_value_heads", 8}, {"hidden_size", 4096},     {"attn_layer_period", 8},
            {"attn_layer_offset", 4}};
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromConfigJson(c));
  EXPECT_EQ(s.attention_layers, 4u);
  EXPECT_EQ(s.layer_types[4], "attention");
  EXPECT_EQ(s.layer_types[12], "attention");
  EXPECT_EQ(s.layer_types[5], "mamba");
}

TEST(ShapeFromConfigJson, AttnLayerIndicesPickAttentionLayers) {
  json c = {{"model_type", "bamba"},
            {"num_hidden_layers", 6},
            {"num_attention_heads", 32},
            {"num_key_value_heads", 8},
            {"hidden_size", 4096}};
  c["attn_layer_indices"] = {1, 4};
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromConfigJson(c));
  EXPECT_THAT(s.kv_heads_per_layer, ElementsAre(0, 8, 0, 0, 8, 0));
}

TEST(ShapeFromConfigJson, AttnLayerIndexPastTheLastLayerIsRejected) {
  json c = {{"num_hidden_layers", 6}, {"num_attention_heads", 32}, {"hidden_size", 4096}};
  c["attn_layer_indices"] = {1, 6};
  EXPECT_THAT(ShapeFromConfigJson(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                               HasSubstr("attn_layer_indices names layer 6 of 6")));
}

TEST(ShapeFromConfigJson, LayersBlockTypeMarksMambaLayers) {
  json c = {{"num_hidden_layers", 4}, {"num_attention_heads", 32}, {"hidden_size", 4096}};
  c["layers_block_type"] = {"mamba", "attention", "mamba", "attention"};
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromConfigJson(c));
  EXPECT_EQ(s.attention_layers, 2u);
}

TEST(ShapeFromConfigJson, LayerTypesOfWrongLengthAreRejected) {
  json c = Llama31_8B();
  c["layer_types"] = {"full_attention"};
  EXPECT_THAT(ShapeFromConfigJson(c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("layer_types has 1 entries but num_hidden_layers is 32")));
}

TEST(ShapeFromConfigJson, UnknownLayerTypeCountsAsAttentionWithANote) {
  json c = {{"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"hidden_size", 256}};
  c["layer_types"] = {"full_attention", "mystery"};
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromConfigJson(c));
  EXPECT_EQ(s.attention_layers, 2u);
  ASSERT_EQ(s.notes.size(), 1u);
  EXPECT_THAT(s.notes[0], HasSubstr("layer type 'mystery' (1 layers) is not known here"));
}

TEST(ShapeFromConfigJson, Gemma2AlternatesSlidingAndGlobalLayers) {
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromConfigJson(Gemma2_9B()));
  ASSERT_TRUE(s.sliding_window.has_value());
  EXPECT_EQ(*s.sliding_window, 4096u);
  EXPECT_EQ(s.layer_types[0], "sliding_attention");
  EXPECT_EQ(s.layer_types[1], "full_attention");
  EXPECT_EQ(s.SlidingLayers(), 21u);
  ASSERT_EQ(s.notes.size(), 1u);
  EXPECT_THAT(s.notes[0], HasSubstr("sliding window of 4,096 tokens on 21 of 42 attention layers"));
}

TEST(ShapeFromConfigJson, SlidingWindowPatternMakesEverySixthLayerGlobal) {
  json c = {{"model_type", "gemma3_text"}, {"num_hidden_layers", 12},    {"num_attention_heads", 8},
            {"num_key_value_heads", 4},    {"hidden_size", 2560},        {"head_dim", 256},
            {"sliding_window", 1024},      {"sliding_window_pattern", 6}};
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromConfigJson(c));
  EXPECT_EQ(s.SlidingLayers(), 10u);
  EXPECT_EQ(s.layer_types[5], "full_attention");
  EXPECT_EQ(s.layer_types[11], "full_attention");
  EXPECT_EQ(s.layer_types[6], "sliding_attention");
}

TEST(ShapeFromConfigJson, ExplicitLayerTypesDecideWhichLayersSlide) {
  json c = {{"model_type", "gpt_oss"},  {"num_hidden_layers", 4}, {"num_attention_heads", 64},
            {"num_key_value_heads", 8}, {"hidden_size", 2880},    {"head_dim", 64},
            {"sliding_window", 128}};
  c["layer_types"] = {"full_attention", "full_attention", "sliding_attention", "full_attention"};
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromConfigJson(c));
  EXPECT_EQ(s.SlidingLayers(), 1u);
  EXPECT_TRUE(s.IsSlidingLayer(2));
  EXPECT_FALSE(s.IsSlidingLayer(0));
}

TEST(ShapeFromConfigJson, MistralWindowWithoutPatternSlidesEveryLayer) {
  json c = {{"model_type", "mistral"},  {"num_hidden_layers", 32}, {"num_attention_heads", 32},
            {"num_key_value_heads", 8}, {"hidden_size", 4096},     {"sliding_window", 4096}};
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromConfigJson(c));
  EXPECT_EQ(s.SlidingLayers(), 32u);
}

TEST(ShapeFromConfigJson, DisabledSlidingWindowIsIgnoredWithANote) {
  json c = {{"model_type", "qwen2"},      {"num_hidden_layers", 28}, {"num_attention_heads", 28},
            {"num_key_value_heads", 4},   {"hidden_size", 3584},     {"sliding_window", 131072},
            {"use_sliding_window", false}};
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromConfigJson(c));
  EXPECT_FALSE(s.sliding_window.has_value());
  EXPECT_EQ(s.SlidingLayers(), 0u);
  ASSERT_EQ(s.notes.size(), 1u);
  EXPECT_EQ(s.notes[0], "sliding_window 131,072 is ignored: use_sliding_window is false");
}

TEST(ShapeFromConfigJson, NullSlidingWindowMeansNoWindow) {
  json c = Llama31_8B();
  c["sliding_window"] = nullptr;
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromConfigJson(c));
  EXPECT_FALSE(s.sliding_window.has_value());
}

TEST(ShapeFromConfigJson, MultimodalConfigReadsTextConfig) {
  json c = {
      {"model_type", "llava"}, {"text_config", Llama31_8B()}, {"vision_config", json::object()}};
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromConfigJson(c));
  EXPECT_EQ(s.architecture, "llama");
  EXPECT_EQ(s.layers, 32u);
  ASSERT_EQ(s.notes.size(), 1u);
  EXPECT_THAT(s.notes[0], HasSubstr("multimodal config (llava): shape read from text_config"));
}

TEST(ShapeFromConfigJson, MissingKeyInTextConfigIsNamedWithItsPath) {
  json text = Llama31_8B();
  text.erase("num_attention_heads");
  json c = {{"model_type", "gemma3"}, {"text_config", text}};
  EXPECT_THAT(ShapeFromConfigJson(c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("config.json: missing text_config.num_attention_heads")));
}

TEST(ShapeFromConfigJson, MissingLayerCountIsNamed) {
  json c = Llama31_8B();
  c.erase("num_hidden_layers");
  EXPECT_THAT(ShapeFromConfigJson(c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("config.json: missing num_hidden_layers")));
}

TEST(ShapeFromConfigJson, MissingHiddenSizeIsNamed) {
  json c = Llama31_8B();
  c.erase("hidden_size");
  EXPECT_THAT(ShapeFromConfigJson(c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("missing hidden_size")));
}

TEST(ShapeFromConfigJson, NegativeValueIsRejectedByName) {
  json c = Llama31_8B();
  c["num_key_value_heads"] = -8;
  EXPECT_THAT(ShapeFromConfigJson(c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("num_key_value_heads is -8, not a non-negative integer")));
}

TEST(ShapeFromConfigJson, StringValueIsRejectedByName) {
  json c = Llama31_8B();
  c["hidden_size"] = "4096";
  EXPECT_THAT(ShapeFromConfigJson(c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hidden_size is \"4096\"")));
}

TEST(ShapeFromConfigJson, IntegralFloatIsAccepted) {
  json c = Llama31_8B();
  c["hidden_size"] = 4096.0;
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromConfigJson(c));
  EXPECT_EQ(s.hidden, 4096u);
}

TEST(ShapeFromConfigJson, ImplausibleLayerCountIsRejectedBeforeAllocating) {
  json c = Llama31_8B();
  c["num_hidden_layers"] = 1000000000000ULL;
  EXPECT_THAT(ShapeFromConfigJson(c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("num_hidden_layers is 1000000000000; expected 1..65536")));
}

TEST(ShapeFromConfigJson, HiddenNotDivisibleByHeadsWithoutHeadDimIsRejected) {
  json c = {{"num_hidden_layers", 2}, {"num_attention_heads", 3}, {"hidden_size", 100}};
  EXPECT_THAT(ShapeFromConfigJson(c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("hidden_size 100 is not a multiple of num_attention_heads 3")));
}

TEST(ShapeFromConfigJson, ZeroHeadsIsRejected) {
  json c = Llama31_8B();
  c["num_attention_heads"] = 0;
  EXPECT_THAT(ShapeFromConfigJson(c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_attention_heads is 0")));
}

TEST(ShapeFromConfigJson, NonObjectIsRejected) {
  EXPECT_THAT(ShapeFromConfigJson(json::array()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a JSON object")));
}

TEST(ShapeFromConfigJson, PureMambaHasNoKvCache) {
  json c = {{"model_type", "mamba"}, {"num_hidden_layers", 24}, {"hidden_size", 768}};
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromConfigJson(c));
  EXPECT_EQ(s.attention_layers, 0u);
  EXPECT_THAT(s.notes[0], HasSubstr("hybrid model: 0 of 24 layers hold a KV cache"));
}

TEST(ShapeFromGgufMetadata, ReadsSmolLM2Numbers) {
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromGgufMetadata(SmolLM2Gguf()));
  EXPECT_EQ(s.architecture, "llama");
  EXPECT_EQ(s.layers, 30u);
  EXPECT_EQ(s.heads, 9u);
  EXPECT_EQ(s.kv_heads, 3u);
  EXPECT_EQ(s.head_dim_k, 64u);
  EXPECT_EQ(s.head_dim_v, 64u);
  EXPECT_EQ(s.hidden, 576u);
  EXPECT_EQ(s.context, 8192u);
  EXPECT_EQ(s.vocab, 49152u);
  EXPECT_EQ(s.attention_layers, 30u);
  EXPECT_TRUE(s.notes.empty());
}

TEST(ShapeFromGgufMetadata, VocabSizeKeyWinsAndTokenArrayIsCounted) {
  json kv = SmolLM2Gguf();
  kv.erase("tokenizer.ggml.tokens_count");
  kv["tokenizer.ggml.tokens"] = {"<s>", "</s>", "a"};
  ASSERT_OK_AND_ASSIGN(ModelShape from_tokens, ShapeFromGgufMetadata(kv));
  EXPECT_EQ(from_tokens.vocab, 3u);
  kv["llama.vocab_size"] = 49152;
  ASSERT_OK_AND_ASSIGN(ModelShape from_key, ShapeFromGgufMetadata(kv));
  EXPECT_EQ(from_key.vocab, 49152u);
}

TEST(ShapeFromGgufMetadata, KeyAndValueLengthsOverrideTheDefault) {
  json kv = SmolLM2Gguf();
  kv["llama.attention.key_length"] = 128;
  kv["llama.attention.value_length"] = 96;
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromGgufMetadata(kv));
  EXPECT_EQ(s.head_dim_k, 128u);
  EXPECT_EQ(s.head_dim_v, 96u);
}

TEST(ShapeFromGgufMetadata, PerLayerKvHeadsWithZerosMarkRecurrentLayers) {
  json kv = {{"general.architecture", "jamba"},
             {"jamba.block_count", 4},
             {"jamba.attention.head_count", 32},
             {"jamba.attention.head_count_kv", {0, 8, 0, 8}},
             {"jamba.embedding_length", 4096}};
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromGgufMetadata(kv));
  EXPECT_EQ(s.kv_heads, 8u);
  EXPECT_THAT(s.kv_heads_per_layer, ElementsAre(0, 8, 0, 8));
  EXPECT_THAT(s.layer_types,
              ElementsAre("recurrent", "full_attention", "recurrent", "full_attention"));
  EXPECT_EQ(s.attention_layers, 2u);
  ASSERT_EQ(s.notes.size(), 1u);
  EXPECT_THAT(s.notes[0], HasSubstr("2 of 4 layers hold a KV cache; the other 2 (2 recurrent)"));
}

TEST(ShapeFromGgufMetadata, PerLayerKvHeadsOfWrongLengthAreRejected) {
  json kv = SmolLM2Gguf();
  kv["llama.attention.head_count_kv"] = {3, 3};
  EXPECT_THAT(ShapeFromGgufMetadata(kv),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("llama.attention.head_count_kv has 2 entries but "
                                 "llama.block_count is 30")));
}

TEST(ShapeFromGgufMetadata, BadPerLayerEntryIsNamedWithItsIndex) {
  json kv = SmolLM2Gguf();
  kv["llama.block_count"] = 2;
  kv["llama.attention.head_count_kv"] = {3, "x"};
  EXPECT_THAT(ShapeFromGgufMetadata(kv),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("llama.attention.head_count_kv[1] is \"x\"")));
}

TEST(ShapeFromGgufMetadata, MissingArchitectureIsNamed) {
  json kv = SmolLM2Gguf();
  kv.erase("general.architecture");
  EXPECT_THAT(ShapeFromGgufMetadata(kv),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("GGUF metadata: missing general.architecture")));
}

TEST(ShapeFromGgufMetadata, MissingBlockCountIsNamed) {
  json kv = SmolLM2Gguf();
  kv.erase("llama.block_count");
  EXPECT_THAT(ShapeFromGgufMetadata(kv),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("GGUF metadata: missing llama.block_count")));
}

TEST(ShapeFromGgufMetadata, MissingHeadCountIsNamed) {
  json kv = SmolLM2Gguf();
  kv.erase("llama.attention.head_count");
  EXPECT_THAT(ShapeFromGgufMetadata(kv),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("GGUF metadata: missing llama.attention.head_count")));
}

TEST(ShapeFromGgufMetadata, DeepSeek2UsesLatentAttention) {
  json kv = {{"general.architecture", "deepseek2"},     {"deepseek2.block_count", 61},
             {"deepseek2.attention.head_count", 128},   {"deepseek2.attention.head_count_kv", 128},
             {"deepseek2.embedding_length", 7168},      {"deepseek2.attention.key_length", 192},
             {"deepseek2.attention.value_length", 128}, {"deepseek2.attention.kv_lora_rank", 512},
             {"deepseek2.rope.dimension_count", 64},    {"deepseek2.context_length", 163840}};
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromGgufMetadata(kv));
  EXPECT_TRUE(s.mla);
  EXPECT_EQ(s.mla_kv_dim, 576u);
  EXPECT_EQ(s.head_dim_k, 192u);
  EXPECT_EQ(s.head_dim_v, 128u);
}

TEST(ShapeFromGgufMetadata, MlaWithoutRopeDimensionIsNamed) {
  json kv = {{"general.architecture", "deepseek2"},
             {"deepseek2.block_count", 2},
             {"deepseek2.attention.head_count", 16},
             {"deepseek2.embedding_length", 2048},
             {"deepseek2.attention.kv_lora_rank", 512}};
  EXPECT_THAT(ShapeFromGgufMetadata(kv),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("missing deepseek2.rope.dimension_count")));
}

TEST(ShapeFromGgufMetadata, Gemma2WindowSlidesEvenLayers) {
  json kv = {{"general.architecture", "gemma2"},     {"gemma2.block_count", 42},
             {"gemma2.attention.head_count", 16},    {"gemma2.attention.head_count_kv", 8},
             {"gemma2.embedding_length", 3584},      {"gemma2.attention.key_length", 256},
             {"gemma2.attention.value_length", 256}, {"gemma2.attention.sliding_window", 4096}};
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromGgufMetadata(kv));
  EXPECT_EQ(s.SlidingLayers(), 21u);
  EXPECT_TRUE(s.IsSlidingLayer(0));
  EXPECT_FALSE(s.IsSlidingLayer(1));
}

TEST(ShapeFromGgufMetadata, BooleanWindowPatternSelectsLayers) {
  json kv = SmolLM2Gguf();
  kv["llama.block_count"] = 3;
  kv["llama.attention.sliding_window"] = 512;
  kv["llama.attention.sliding_window_pattern"] = {true, false, true};
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromGgufMetadata(kv));
  EXPECT_THAT(s.layer_types,
              ElementsAre("sliding_attention", "full_attention", "sliding_attention"));
}

TEST(ModelShapeToJson, WritesCountsAsPlainIntegers) {
  ASSERT_OK_AND_ASSIGN(ModelShape s, ShapeFromGgufMetadata(SmolLM2Gguf()));
  json j = ModelShapeToJson(s);
  EXPECT_TRUE(j["layers"].is_number_unsigned());
  EXPECT_EQ(j["layers"], 30);
  EXPECT_EQ(j["kv_heads"], 3);
  EXPECT_EQ(j["head_dim_k"], 64);
  EXPECT_EQ(j["attention_layers"], 30);
  EXPECT_TRUE(j["sliding_window"].is_null());
  EXPECT_EQ(j["architecture"], "llama");
  EXPECT_FALSE(j.contains("mla_kv_dim"));
}

}  // namespace
}  // namespace modelfs
