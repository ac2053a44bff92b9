// CompareModels on real files written by the project's writers: a bf16 checkpoint against its f16
// conversion and against a Q8_0 GGUF made as llama.cpp's converter makes it, and the ways a
// derived model stops being equivalent (another model, one tensor replaced, Q not permuted, a
// tensor missing), each refusal naming the tensor.
#include "core/attest/equivalence.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "testsupport/synth/equivalent_models.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

using ::modelfs::testing::TinyLlamaOptions;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class EquivalenceTest : public ::testing::Test {
 protected:
  std::vector<ModelFileReader> Open(const std::string& path) {
    std::vector<ModelFileReader> out;
    auto r = OpenFileRangeReader(path);
    EXPECT_TRUE(r.ok()) << r.status();
    out.push_back({std::filesystem::path(path).filename().string(), std::move(*r)});
    return out;
  }
  std::string Safetensors(const std::string& name, TinyLlamaOptions o) {
    const std::string path = dir_.Join(name + ".safetensors").string();
    EXPECT_OK(testing::WriteEquivalenceSafetensors(path, o));
    return path;
  }
  std::string Gguf(const std::string& name, TinyLlamaOptions o) {
    const std::string path = dir_.Join(name + ".gguf").string();
    EXPECT_OK(testing::WriteEquivalenceGguf(path, o));
    return path;
  }
  EquivalenceReport Compare(const std::string& source, const std::string& derived) {
    auto s = Open(source);
    auto d = Open(derived);
    auto report = CompareModels(s, d);
    EXPECT_TRUE(report.ok()) << report.status();
    return report.ok() ? *report : EquivalenceReport{};
  }
  const TensorComparison* Find(const EquivalenceReport& r, const std::string& derived) {
    for (const auto& t : r.tensors) {
      if (t.derived == derived) return &t;
    }
    return nullptr;
  }
  testing::TempDir dir_;
};

TEST_F(EquivalenceTest, Bf16AndItsF16ConversionAreEquivalentTensorByTensor) {
  const std::string src = Safetensors("src", {});
  TinyLlamaOptions f16;
  f16.dtype = "F16";
  const std::string dst = Safetensors("f16", f16);
  EquivalenceReport r = Compare(src, dst);
  EXPECT_TRUE(r.equivalent) << r.Refusal();
  EXPECT_EQ(r.name_map, "identity");
  EXPECT_EQ(r.tensors.size(), static_cast<size_t>(testing::kTinyLlamaTensors));
  ASSERT_EQ(r.tolerances.count("BF16->F16"), 1u);
  for (const auto& t : r.tensors) {
    // bf16 values are exact in f16 but for the few below f16's normal range.
    EXPECT_LT(t.rel_l2, 1e-6) << t.derived;
    EXPECT_GT(t.cosine, 0.999999) << t.derived;
  }
  // One read of each: every tensor byte and the headers, nothing twice.
  EXPECT_GE(r.source_bytes_read, r.source_tensor_bytes);
  EXPECT_LE(r.source_bytes_read, r.source_tensor_bytes + 64 * 1024);
  EXPECT_LE(r.derived_bytes_read, r.derived_tensor_bytes + 64 * 1024);
}

TEST_F(EquivalenceTest, TheF16WithOneTensorReplacedFailsNamingThatTensor) {
  const std::string src = Safetensors("src", {});
  TinyLlamaOptions f16;
  f16.dtype = "F16";
  f16.replace_tensor = "model.layers.1.mlp.up_proj.weight";
  EquivalenceReport r = Compare(src, Safetensors("f16", f16));
  EXPECT_FALSE(r.equivalent);
  EXPECT_EQ(r.failed(), 1u);
  EXPECT_THAT(r.Refusal(),
              StartsWith("model.layers.1.mlp.up_proj.weight (BF16->F16): relative L2"));
  const TensorComparison* t = Find(r, "model.layers.1.mlp.up_proj.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_GT(t->rel_l2, 1.0);
  EXPECT_LT(t->cosine, 0.2);
}

TEST_F(EquivalenceTest, AQ8_0GgufOfTheCheckpointPassesWithTheLlamaPermutationUndone) {
  EquivalenceReport r = Compare(Safetensors("src", {}), Gguf("q8", {}));
  EXPECT_TRUE(r.equivalent) << r.Refusal();
  EXPECT_EQ(r.name_map, "llama");
  EXPECT_EQ(r.arch_params.n_head, testing::kTinyLlamaHeads);
  EXPECT_EQ(r.tensors.size(), static_cast<size_t>(testing::kTinyLlamaTensors));
  const TensorComparison* q = Find(r, "blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->transform, "permute_rows");
  EXPECT_EQ(q->source_type, "BF16");
  EXPECT_EQ(q->derived_type, "Q8_0");
  EXPECT_THAT(q->source, ::testing::ElementsAre("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_LT(q->rel_l2, 0.01);
  EXPECT_GT(q->cosine, 0.9999);
  const TensorComparison* norm = Find(r, "output_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->derived_type, "F32");
  EXPECT_EQ(norm->rel_l2, 0.0);
  EXPECT_EQ(r.tolerances.count("BF16->Q8_0"), 1u);
  EXPECT_EQ(r.tolerances.count("BF16->F32"), 1u);
}

TEST_F(EquivalenceTest, AQ8_0OfADifferentModelFailsNamingTheFirstTensors) {
  TinyLlamaOptions other;
  other.seed = 2;
  EquivalenceReport r = Compare(Safetensors("src", {}), Gguf("other", other));
  EXPECT_FALSE(r.equivalent);
  // The source's file order: the writer lays tensors out by name, lm_head first.
  EXPECT_THAT(r.Refusal(), StartsWith("output.weight (BF16->Q8_0, source lm_head.weight): "
                                      "relative L2 error"));
  EXPECT_THAT(r.Refusal(), HasSubstr("\ntoken_embd.weight (BF16->Q8_0"));
  EXPECT_THAT(r.Refusal(), HasSubstr("more tensors differ"));
}

TEST_F(EquivalenceTest, AWronglyPermutedQFailsNamingQAndK) {
  TinyLlamaOptions unpermuted;
  unpermuted.permute_qk = false;
  EquivalenceReport r = Compare(Safetensors("src", {}), Gguf("bad", unpermuted));
  EXPECT_FALSE(r.equivalent);
  EXPECT_EQ(r.failed(), 4u);  // attn_q and attn_k of both blocks
  EXPECT_THAT(r.Refusal(), StartsWith("blk.0.attn_k.weight (BF16->Q8_0, source "
                                      "model.layers.0.self_attn.k_proj.weight): relative L2"));
  EXPECT_THAT(r.Refusal(), HasSubstr("\nblk.0.attn_q.weight (BF16->Q8_0"));
  EXPECT_FALSE(Find(r, "blk.0.attn_q.weight")->pass);
  EXPECT_TRUE(Find(r, "blk.0.attn_v.weight")->pass);
}

TEST_F(EquivalenceTest, ATensorTheDerivedModelLacksIsNamed) {
  TinyLlamaOptions q8;
  q8.drop_tensor = "lm_head.weight";
  EquivalenceReport r = Compare(Safetensors("src", {}), Gguf("q8", q8));
  EXPECT_FALSE(r.equivalent);
  EXPECT_EQ(r.failed(), 0u);
  EXPECT_THAT(r.missing, ::testing::ElementsAre("lm_head.weight"));
  EXPECT_EQ(r.Refusal(), "lm_head.weight: missing from the derived model");
}

TEST_F(EquivalenceTest, TiedEmbeddingsWithNoLmHeadOnEitherSideAreEquivalent) {
  TinyLlamaOptions tied;
  tied.drop_tensor = "lm_head.weight";
  EquivalenceReport r = Compare(Safetensors("src", tied), Gguf("q8", tied));
  EXPECT_TRUE(r.equivalent) << r.Refusal();
  EXPECT_EQ(r.tensors.size(), static_cast<size_t>(testing::kTinyLlamaTensors - 1));
}

TEST_F(EquivalenceTest, AGemmaGgufPassesWithItsNormsStoredPlusOneAndFailsWithout) {
  TinyLlamaOptions gemma;
  gemma.arch = "gemma";
  const std::string src = Safetensors("gemma", gemma);
  EquivalenceReport r = Compare(src, Gguf("gemma", gemma));
  EXPECT_TRUE(r.equivalent) << r.Refusal();
  EXPECT_EQ(r.name_map, "gemma");
  EXPECT_EQ(Find(r, "output_norm.weight")->transform, "add_one");
  EXPECT_EQ(Find(r, "blk.0.attn_q.weight")->transform, "none");
  TinyLlamaOptions raw = gemma;
  raw.gemma_add_one = false;
  EquivalenceReport bad = Compare(src, Gguf("gemma-raw", raw));
  EXPECT_FALSE(bad.equivalent);
  EXPECT_EQ(bad.failed(), 5u);  // output_norm and two norms per block
  EXPECT_FALSE(Find(bad, "blk.1.ffn_norm.weight")->pass);
}

TEST_F(EquivalenceTest, AMixtralGgufStacksTheExpertsInOrder) {
  TinyLlamaOptions moe;
  moe.arch = "mixtral";
  EquivalenceReport r = Compare(Safetensors("moe", moe), Gguf("moe", moe));
  EXPECT_TRUE(r.equivalent) << r.Refusal();
  EXPECT_EQ(r.name_map, "mixtral");
  EXPECT_EQ(r.arch_params.n_expert, 3u);
  const TensorComparison* gate = Find(r, "blk.0.ffn_gate_exps.weight");
  ASSERT_NE(gate, nullptr);
  EXPECT_EQ(gate->transform, "stack_experts");
  EXPECT_THAT(gate->shape, ::testing::ElementsAre(3, 128, 64));
  EXPECT_THAT(gate->source,
              ::testing::ElementsAre("model.layers.0.block_sparse_moe.experts.0.w1.weight",
                                     "model.layers.0.block_sparse_moe.experts.1.w1.weight",
                                     "model.layers.0.block_sparse_moe.experts.2.w1.weight"));
  EXPECT_TRUE(Find(r, "blk.1.ffn_gate_inp.weight")->pass);
  EXPECT_TRUE(Find(r, "blk.1.attn_k.weight")->pass);  // permuted, as llama
}

TEST_F(EquivalenceTest, AQ4_KGgufPassesWithinTheLooserQ4_KBound) {
  TinyLlamaOptions q4;
  q4.gguf_type = "Q4_K";
  q4.hidden = 256;  // Q4_K blocks hold 256 values: rows of 256
  q4.ffn = 512;
  EquivalenceReport r = Compare(Safetensors("src256", q4), Gguf("q4", q4));
  EXPECT_TRUE(r.equivalent) << r.Refusal();
  double worst = 0;
  for (const auto& t : r.tensors) {
    if (t.derived_type == "Q4_K") worst = std::max(worst, t.rel_l2);
  }
  EXPECT_GT(worst, 0.02);  // far looser than Q8_0 ...
  EXPECT_LT(worst, 0.15);  // ... and within its bound
  EXPECT_EQ(r.tolerances.count("BF16->Q4_K"), 1u);
}

TEST_F(EquivalenceTest, DefaultTolerancesFollowTheDerivedTypesPrecision) {
  EXPECT_EQ(DefaultTolerance("BF16", "F32").max_rel_l2, 1e-6);
  EXPECT_EQ(DefaultTolerance("BF16", "F16").max_rel_l2, 1e-3);
  EXPECT_EQ(DefaultTolerance("F32", "BF16").max_rel_l2, 4e-3);
  EXPECT_EQ(DefaultTolerance("BF16", "Q8_0").max_rel_l2, 0.02);
  EXPECT_EQ(DefaultTolerance("BF16", "Q4_K").min_cosine, 0.985);
  EXPECT_EQ(TolerancePair("BF16", "Q8_0"), "BF16->Q8_0");
}

}  // namespace
}  // namespace modelfs
