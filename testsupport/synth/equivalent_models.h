// Small models for equivalence attestations (tests/attest, integration/trust): a llama-shaped
// bf16 safetensors checkpoint from a seed, its f16 conversion (every byte differs), and a GGUF of
// it made with the project's GgufWriter and Q8_0 quantizer as llama.cpp's converter lays it out
// (names mapped, Q/K rows permuted, dims reversed, 1-D norms kept F32).
//
// Thread safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace modelfs::testing {

// By default 2 blocks, hidden 64, 4 heads of 16 (2 KV heads), ffn 128, vocab 32 (about 220 KB in
// bf16); larger shapes for measurements (modelfs-synth equivalent).
struct TinyLlamaOptions {
  uint32_t layers = 2, hidden = 64, heads = 4, kv_heads = 2, ffn = 128, vocab = 32;
  // "llama", "gemma" (norms stored +1, no permutation) or "mixtral" (n_expert experts per block
  // instead of the MLP, stacked in the GGUF).
  std::string arch = "llama";
  uint32_t n_expert = 3;
  uint32_t seed = 1;
  std::string dtype = "BF16";  // "BF16", "F16" or "F32" (values rounded through BF16 first)
  // Replaces this tensor's values by another seed's (the model "with one tensor replaced").
  std::string replace_tensor;
  // Leaves this tensor (HF name) out.
  std::string drop_tensor;
  // GGUF only: the type of the 2-D weights ("Q8_0", "F16", ...); 1-D norms stay F32.
  std::string gguf_type = "Q8_0";
  // GGUF only: apply llama.cpp's transforms (Q/K permutation, gemma's +1); false: the wrongly
  // converted model.
  bool permute_qk = true;
  bool gemma_add_one = true;
};
inline constexpr uint32_t kTinyLlamaHeads = 4;
inline constexpr uint32_t kTinyLlamaKvHeads = 2;
inline constexpr int kTinyLlamaTensors = 2 + 2 * 9 + 1;  // embed, norm, lm_head + 9 per block
// The layers whose count `mib` of bf16 weights about holds, for the other shapes of `o`.
uint32_t LayersForMib(const TinyLlamaOptions& o, uint64_t mib);

// model.safetensors (Hugging Face names). Errors: the writer's.
absl::Status WriteEquivalenceSafetensors(const std::string& path, const TinyLlamaOptions& options);
// model.gguf (llama.cpp's names, general.architecture "llama", head counts). Errors: the
// writer's or the quantizer's.
absl::Status WriteEquivalenceGguf(const std::string& path, const TinyLlamaOptions& options);

}  // namespace modelfs::testing
