// Model shapes and a memory request shared by the tests of the memory arithmetic
// (tests/formats/memory_test.cc) and of its rendering (tests/cli/memory_render_test.cc), so
// both check the same figures.
#pragma once

#include <cstdint>

#include <gtest/gtest.h>

#include "absl/status/statusor.h"
#include "core/formats/memory.h"
#include "core/formats/model_shape.h"
#include "nlohmann/json.hpp"

namespace modelfs::testing {

inline constexpr uint64_t kLlamaParams = 8030000000;  // 8.03e9

inline ModelShape Shape(const nlohmann::json& config) {
  absl::StatusOr<ModelShape> s = ShapeFromConfigJson(config);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : ModelShape{};
}

// The lesson's llama31-8b.json: no head_dim, no context.
inline ModelShape Llama31_8B() {
  return Shape({{"num_hidden_layers", 32},
                {"num_attention_heads", 32},
                {"num_key_value_heads", 8},
                {"hidden_size", 4096}});
}

inline ModelShape SmolLM2() {
  absl::StatusOr<ModelShape> s = ShapeFromGgufMetadata({{"general.architecture", "llama"},
                                                        {"llama.block_count", 30},
                                                        {"llama.attention.head_count", 9},
                                                        {"llama.attention.head_count_kv", 3},
                                                        {"llama.embedding_length", 576},
                                                        {"llama.context_length", 8192}});
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : ModelShape{};
}

inline ModelShape DeepSeekV3() {
  return Shape({{"model_type", "deepseek_v3"},
                {"num_hidden_layers", 61},
                {"num_attention_heads", 128},
                {"num_key_value_heads", 128},
                {"hidden_size", 7168},
                {"kv_lora_rank", 512},
                {"qk_rope_head_dim", 64},
                {"qk_nope_head_dim", 128},
                {"v_head_dim", 128}});
}

inline ModelShape Gemma2_9B() {
  return Shape({{"model_type", "gemma2"},
                {"num_hidden_layers", 42},
                {"num_attention_heads", 16},
                {"num_key_value_heads", 8},
                {"hidden_size", 3584},
                {"head_dim", 256},
                {"sliding_window", 4096},
                {"max_position_embeddings", 8192}});
}

inline MemoryRequest LlamaRequest() {
  MemoryRequest req;
  req.shape = Llama31_8B();
  req.params = kLlamaParams;
  req.quants = {"Q4_K"};
  req.ctx = 32768;
  req.seqs = 16;
  req.gpu_gib = 24;
  return req;
}

}  // namespace modelfs::testing
