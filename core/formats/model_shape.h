// ModelShape: the architecture numbers that size a model's KV cache (layers, heads, KV heads,
// head dims, context, sliding window, MLA, hybrid layer kinds), read from a Hugging Face
// config.json or from GGUF metadata. Weight bytes come from the files; these numbers do not.
//
// Thread safety: plain values and pure functions; safe to call from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include "absl/status/statusor.h"

namespace modelfs {

// Layer kinds as config.json's layer_types spells them. Layers of a kind that holds no KV cache
// (linear attention, SSM) get 0 in ModelShape::kv_heads_per_layer.
inline constexpr char kFullAttention[] = "full_attention";
inline constexpr char kSlidingAttention[] = "sliding_attention";

// The most layers a shape may claim; per-layer tables are sized by it, so a corrupt count must
// be refused before anything is allocated.
inline constexpr uint64_t kMaxModelLayers = 1 << 16;

struct ModelShape {
  std::string architecture;  // config.json model_type or GGUF general.architecture
  uint64_t layers = 0;
  uint64_t heads = 0;     // query heads (the largest count when GGUF lists one per layer)
  uint64_t kv_heads = 0;  // KV heads of an attention layer (the largest when they differ)
  // One entry per layer (size == layers once parsed); 0 marks a layer without a KV cache.
  // A hand-built shape may leave it empty: every layer then has kv_heads.
  std::vector<uint64_t> kv_heads_per_layer;
  uint64_t head_dim_k = 0;
  uint64_t head_dim_v = 0;
  uint64_t hidden = 0;
  uint64_t context = 0;  // trained context length; 0 when the source does not say
  uint64_t vocab = 0;    // 0 when the source does not say
  // Set only when the window is in force (Qwen2's use_sliding_window=false leaves it unset).
  std::optional<uint64_t> sliding_window;
  // One entry per layer (size == layers once parsed): "full_attention", "sliding_attention",
  // "linear_attention", "mamba", "attention", ... A hand-built shape may leave it empty: every
  // layer is then sliding when sliding_window is set, full otherwise.
  std::vector<std::string> layer_types;
  bool mla = false;         // multi-head latent attention (DeepSeek-V2/V3, MiniCPM3)
  uint64_t mla_kv_dim = 0;  // kv_lora_rank + qk_rope_head_dim: the latent cached per token/layer
  uint64_t kv_lora_rank = 0;
  uint64_t rope_head_dim = 0;
  uint64_t attention_layers = 0;   // layers that hold a KV cache
  std::vector<std::string> notes;  // hybrid/SSM, sliding window, MLA, multimodal warnings

  // KV heads of layer i (0: no KV cache there).
  uint64_t KvHeadsOfLayer(uint64_t i) const;
  // Whether layer i keeps only the last sliding_window tokens (false when no window is set).
  bool IsSlidingLayer(uint64_t i) const;
  // Number of layers for which IsSlidingLayer() and KvHeadsOfLayer() > 0.
  uint64_t SlidingLayers() const;
};

// Reads a Hugging Face config.json (already parsed). Uses text_config when the top level is a
// multimodal wrapper. Recognised: num_hidden_layers (n_layer), num_attention_heads (n_head),
// num_key_value_heads (num_kv_heads, multi_query; default = heads), hidden_size (n_embd,
// d_model), head_dim (default hidden/heads), max_position_embeddings (n_positions),
// vocab_size, sliding_window (+ use_sliding_window, sliding_window_pattern, layer_types),
// kv_lora_rank + qk_rope_head_dim (MLA), qk_nope_head_dim, v_head_dim, and hybrid layouts
// (layer_types, layers_block_type, attn_layer_indices, attn_layer_period/offset,
// hybrid_override_pattern, full_attention_interval).
// Errors: kInvalidArgument naming the key that is missing, not a number or implausible.
absl::StatusOr<ModelShape> ShapeFromConfigJson(const nlohmann::json& config);

// Reads GGUF metadata given as a JSON object of key -> value (arrays as JSON arrays). With
// A = general.architecture: A.block_count, A.attention.head_count, A.attention.head_count_kv
// (scalar or per-layer array; 0 = no KV cache in that layer), A.embedding_length,
// A.attention.key_length / value_length (default embedding/heads), A.context_length,
// A.vocab_size (else "tokenizer.ggml.tokens_count" or the length of "tokenizer.ggml.tokens"),
// A.attention.sliding_window (+ A.attention.sliding_window_pattern), and for MLA
// A.attention.kv_lora_rank + A.rope.dimension_count.
// Errors: kInvalidArgument naming the key that is missing, not a number or implausible.
absl::StatusOr<ModelShape> ShapeFromGgufMetadata(const nlohmann::json& kv);

// The shape as JSON (numbers as plain integers), for `modelfs inspect --json` and reports.
nlohmann::json ModelShapeToJson(const ModelShape& shape);

}  // namespace modelfs
