// The GGUF <-> Hugging Face tensor name map: every covered architecture's names both ways,
// the transforms (Q/K permutation, gemma +1, mixtral stacks) and the shape convention.
#include "core/formats/tensor_names.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TensorNameMap MapFor(std::string_view arch, TensorArchParams p = {4, 2, 0}) {
  auto map = TensorNameMap::ForArchitecture(arch, p);
  EXPECT_TRUE(map.ok()) << map.status();
  return *map;
}

// Every name of one block and the globals maps both ways, back to itself.
void ExpectRoundTrip(const TensorNameMap& map, const std::vector<std::string>& gguf,
                     const std::vector<std::string>& hf) {
  ASSERT_EQ(gguf.size(), hf.size());
  for (size_t i = 0; i < gguf.size(); ++i) {
    auto from_gguf = map.FromGguf(gguf[i]);
    ASSERT_TRUE(from_gguf.has_value()) << map.architecture() << " " << gguf[i];
    EXPECT_THAT(from_gguf->hf_names, ElementsAre(hf[i])) << map.architecture() << " " << gguf[i];
    auto from_hf = map.FromHf(hf[i]);
    ASSERT_TRUE(from_hf.has_value()) << map.architecture() << " " << hf[i];
    EXPECT_EQ(from_hf->gguf_name, gguf[i]) << map.architecture();
  }
}

const std::vector<std::string> kDenseGguf = {
    "token_embd.weight",     "output.weight",
    "output_norm.weight",    "blk.0.attn_norm.weight",
    "blk.0.attn_q.weight",   "blk.0.attn_k.weight",
    "blk.0.attn_v.weight",   "blk.0.attn_output.weight",
    "blk.0.ffn_norm.weight", "blk.0.ffn_gate.weight",
    "blk.0.ffn_up.weight",   "blk.31.ffn_down.weight",
};
const std::vector<std::string> kDenseHf = {
    "model.embed_tokens.weight",
    "lm_head.weight",
    "model.norm.weight",
    "model.layers.0.input_layernorm.weight",
    "model.layers.0.self_attn.q_proj.weight",
    "model.layers.0.self_attn.k_proj.weight",
    "model.layers.0.self_attn.v_proj.weight",
    "model.layers.0.self_attn.o_proj.weight",
    "model.layers.0.post_attention_layernorm.weight",
    "model.layers.0.mlp.gate_proj.weight",
    "model.layers.0.mlp.up_proj.weight",
    "model.layers.31.mlp.down_proj.weight",
};

TEST(TensorNames, LlamaMapsEveryNameBothWays) {
  ExpectRoundTrip(MapFor("llama"), kDenseGguf, kDenseHf);
}
TEST(TensorNames, MistralMapsEveryNameBothWays) {
  ExpectRoundTrip(MapFor("mistral"), kDenseGguf, kDenseHf);
}
TEST(TensorNames, Qwen2MapsEveryNameAndItsAttentionBiasesBothWays) {
  auto map = MapFor("qwen2");
  ExpectRoundTrip(map, kDenseGguf, kDenseHf);
  ExpectRoundTrip(map, {"blk.3.attn_q.bias", "blk.3.attn_k.bias", "blk.3.attn_v.bias"},
                  {"model.layers.3.self_attn.q_proj.bias", "model.layers.3.self_attn.k_proj.bias",
                   "model.layers.3.self_attn.v_proj.bias"});
  EXPECT_FALSE(map.FromGguf("blk.0.attn_q_norm.weight").has_value());
}
TEST(TensorNames, Qwen3MapsEveryNameAndItsQkNormsBothWays) {
  auto map = MapFor("qwen3");
  ExpectRoundTrip(map, kDenseGguf, kDenseHf);
  ExpectRoundTrip(
      map, {"blk.1.attn_q_norm.weight", "blk.1.attn_k_norm.weight"},
      {"model.layers.1.self_attn.q_norm.weight", "model.layers.1.self_attn.k_norm.weight"});
  EXPECT_FALSE(map.FromGguf("blk.0.attn_q.bias").has_value());
}
TEST(TensorNames, GemmaMapsEveryNameBothWays) {
  ExpectRoundTrip(MapFor("gemma"), kDenseGguf, kDenseHf);
}

TEST(TensorNames, MixtralStacksExpertsAndMapsTheRouter) {
  auto map = MapFor("llama", {4, 2, 3});  // a GGUF "llama" with experts is mixtral
  EXPECT_EQ(map.architecture(), "mixtral");
  ExpectRoundTrip(map, {"token_embd.weight", "blk.0.attn_q.weight", "blk.0.ffn_gate_inp.weight"},
                  {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                   "model.layers.0.block_sparse_moe.gate.weight"});
  auto gate = map.FromGguf("blk.2.ffn_gate_exps.weight");
  ASSERT_TRUE(gate.has_value());
  EXPECT_EQ(gate->transform, TensorTransform::kStackExperts);
  EXPECT_THAT(gate->hf_names, ElementsAre("model.layers.2.block_sparse_moe.experts.0.w1.weight",
                                          "model.layers.2.block_sparse_moe.experts.1.w1.weight",
                                          "model.layers.2.block_sparse_moe.experts.2.w1.weight"));
  uint32_t expert = 99;
  auto down = map.FromHf("model.layers.2.block_sparse_moe.experts.1.w2.weight", &expert);
  ASSERT_TRUE(down.has_value());
  EXPECT_EQ(down->gguf_name, "blk.2.ffn_down_exps.weight");
  EXPECT_EQ(expert, 1u);
  auto up = map.FromHf("model.layers.2.block_sparse_moe.experts.2.w3.weight", &expert);
  ASSERT_TRUE(up.has_value());
  EXPECT_EQ(up->gguf_name, "blk.2.ffn_up_exps.weight");
  EXPECT_EQ(expert, 2u);
  EXPECT_FALSE(map.FromHf("model.layers.2.block_sparse_moe.experts.3.w1.weight").has_value());
  EXPECT_FALSE(map.FromGguf("blk.0.ffn_gate.weight").has_value());
}

TEST(TensorNames, LlamaAndMistralPermuteQOverHeadsAndKOverKvHeads) {
  for (const char* arch : {"llama", "mistral"}) {
    auto map = MapFor(arch, {8, 2, 0});
    auto q = map.FromGguf("blk.0.attn_q.weight");
    auto k = map.FromGguf("blk.0.attn_k.weight");
    ASSERT_TRUE(q.has_value() && k.has_value());
    EXPECT_EQ(q->transform, TensorTransform::kPermuteRows);
    EXPECT_EQ(q->heads, 8u);
    EXPECT_EQ(k->transform, TensorTransform::kPermuteRows);
    EXPECT_EQ(k->heads, 2u);
    EXPECT_EQ(map.FromGguf("blk.0.attn_v.weight")->transform, TensorTransform::kNone);
  }
}

TEST(TensorNames, QwenAndGemmaDoNotPermute) {
  for (const char* arch : {"qwen2", "qwen3", "gemma"}) {
    auto map = MapFor(arch);
    EXPECT_FALSE(map.permutes_qk()) << arch;
    EXPECT_EQ(map.FromGguf("blk.0.attn_q.weight")->transform, TensorTransform::kNone) << arch;
    EXPECT_EQ(map.FromGguf("blk.0.attn_k.weight")->transform, TensorTransform::kNone) << arch;
  }
}

TEST(TensorNames, GemmaNormsAreStoredPlusOneAndOthersAreNot) {
  auto map = MapFor("gemma");
  for (const char* n : {"output_norm.weight", "blk.0.attn_norm.weight", "blk.0.ffn_norm.weight"}) {
    EXPECT_EQ(map.FromGguf(n)->transform, TensorTransform::kAddOne) << n;
  }
  EXPECT_EQ(map.FromGguf("blk.0.ffn_up.weight")->transform, TensorTransform::kNone);
  EXPECT_EQ(MapFor("llama").FromGguf("output_norm.weight")->transform, TensorTransform::kNone);
  std::vector<float> v = {0.0f, -0.5f, 2.0f};
  auto norm = *map.FromGguf("output_norm.weight");
  ASSERT_OK(HfToGgufValues(norm, {3}, v));
  EXPECT_THAT(v, ElementsAre(1.0f, 0.5f, 3.0f));
  ASSERT_OK(GgufToHfValues(norm, {3}, v));
  EXPECT_THAT(v, ElementsAre(0.0f, -0.5f, 2.0f));
}

TEST(TensorNames, PermutationInterleavesEachHeadsHalvesAndInvertsExactly) {
  // 2 heads of head_dim 4, one column: HF rows [h0: a0 a1 b0 b1 | h1: c0 c1 d0 d1] where a/b
  // are the rotate-half halves; GGUF interleaves them: [a0 b0 a1 b1 | c0 d0 c1 d1].
  TensorMapping q{"blk.0.attn_q.weight", {"x"}, TensorTransform::kPermuteRows, 2};
  std::vector<float> v = {0, 1, 2, 3, 4, 5, 6, 7};
  ASSERT_OK(HfToGgufValues(q, {8, 1}, v));
  EXPECT_THAT(v, ElementsAre(0, 2, 1, 3, 4, 6, 5, 7));
  ASSERT_OK(GgufToHfValues(q, {8, 1}, v));
  EXPECT_THAT(v, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
  // Whole rows move: two columns.
  std::vector<float> w = {0, 10, 1, 11, 2, 12, 3, 13};
  TensorMapping one{"blk.0.attn_k.weight", {"x"}, TensorTransform::kPermuteRows, 1};
  ASSERT_OK(HfToGgufValues(one, {4, 2}, w));
  EXPECT_THAT(w, ElementsAre(0, 10, 2, 12, 1, 11, 3, 13));
}

TEST(TensorNames, PermutationRefusesRowsThatDoNotDivideIntoHeadPairs) {
  TensorMapping q{"blk.0.attn_q.weight", {"x"}, TensorTransform::kPermuteRows, 4};
  std::vector<float> v(6 * 2);
  EXPECT_THAT(HfToGgufValues(q, {6, 2}, v),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("blk.0.attn_q.weight")));
}

TEST(TensorNames, GgufDimsAreTheHfShapeReversed) {
  EXPECT_THAT(GgufDimsFromHfShape({4096, 11008}), ElementsAre(11008, 4096));
  EXPECT_THAT(HfShapeFromGgufDims({11008, 4096}), ElementsAre(4096, 11008));
  EXPECT_THAT(GgufDimsFromHfShape({8, 14336, 4096}), ElementsAre(4096, 14336, 8));
}

TEST(TensorNames, UnknownArchitecturesAndNamesAreRefusedByName) {
  EXPECT_THAT(TensorNameMap::ForArchitecture("falcon", {}),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("falcon")));
  EXPECT_THAT(TensorNameMap::ForArchitecture("llama", {0, 0, 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("head count")));
  EXPECT_THAT(TensorNameMap::ForArchitecture("llama", {6, 4, 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("KV heads")));
  auto map = MapFor("llama");
  EXPECT_FALSE(map.FromGguf("blk.x.attn_q.weight").has_value());
  EXPECT_FALSE(map.FromGguf("blk.01.attn_q.weight").has_value());
  EXPECT_FALSE(map.FromHf("model.layers.0.self_attn.rotary_emb.inv_freq").has_value());
  EXPECT_FALSE(map.FromHf("model.layers.0.self_attn.q_norm.weight").has_value());
}

}  // namespace
}  // namespace modelfs
