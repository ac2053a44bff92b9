// Synthetic GGUF models with the shapes and metadata keys llama.cpp writes, built with
// GgufWriter: for tests, the README demo and benchmarks, where downloading a real model is
// not an option. Weights come from a fixed-seed PRNG, so every call gives the same bytes.
//
// Thread safety: free functions with no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/formats/gguf_writer.h"

namespace modelfs {

// SmolLM2-135M-Instruct as bartowski's Q8_0 GGUF: llama architecture, 30 layers, embedding
// 576, 9 heads, 3 KV heads, FFN 1536, vocab 49152 (tied embeddings: no output.weight),
// context 8192. 272 tensors, 134,515,008 parameters: 211 Q8_0 tensors (142,884,864 bytes)
// and 61 F32 norms (140,544 bytes). Metadata: general.*, llama.*, and a tokenizer with
// 49152 synthetic token strings. With sparse_data the tensor data is left as holes;
// otherwise it is real Q8_0 of PRNG weights (about 145 MB, generated per tensor as written).
absl::StatusOr<GgufWriter> MakeSmolLm2Q8Writer(bool sparse_data);
absl::Status WriteSmolLm2Q8Gguf(const std::string& path, bool sparse_data);

// A small llama model with real bytes in several types: token_embd F16, attention Q8_0,
// FFN Q4_0, norms F32, output F16. With the defaults the file is about 4.3 MB.
struct TinyLlamaSpec {
  uint32_t layers = 4;
  uint32_t embedding = 256;  // multiple of 32 (Q4_0/Q8_0 rows)
  uint32_t heads = 8;
  uint32_t kv_heads = 4;
  uint32_t ffn = 768;  // multiple of 32
  uint32_t vocab = 2048;
  uint32_t context = 2048;
  uint32_t version = 3;
  uint64_t seed = 42;
};
absl::StatusOr<GgufWriter> MakeTinyLlamaWriter(const TinyLlamaSpec& spec = {});
absl::Status WriteTinyLlamaGguf(const std::string& path, const TinyLlamaSpec& spec = {});

// A llama model that llama.cpp loads and runs, not only parses: the metadata its loader
// requires, an SPM ("llama") vocabulary that its tokenizer accepts (<unk>, <s>, </s>, the 256
// byte tokens <0x00>..<0xFF>, then word pieces with descending scores), attention and FFN
// matrices and output.weight in `weight_type` (F16, Q8_0 or Q4_K), token_embd in F16, norms
// in F32. With the defaults the file is about 4 MB at Q8_0. Weights are PRNG values, so the
// model's output is meaningless but deterministic: the same spec gives the same bytes, and
// llama.cpp the same logits for the same tokens.
struct LlamaCppSpec {
  uint32_t layers = 4;
  uint32_t embedding = 256;  // multiple of 256 for Q4_K rows, of 32 otherwise
  uint32_t heads = 8;
  uint32_t kv_heads = 4;
  uint32_t ffn = 768;    // same rule as embedding
  uint32_t vocab = 512;  // at least 259 (3 special + 256 byte tokens)
  uint32_t context = 512;
  uint32_t weight_type = 8;  // ggml type id: 1 F16, 8 Q8_0, 12 Q4_K
  uint64_t seed = 23;
};
absl::StatusOr<GgufWriter> MakeLlamaCppWriter(const LlamaCppSpec& spec = {});
absl::Status WriteLlamaCppGguf(const std::string& path, const LlamaCppSpec& spec = {});
// The layer count that brings a model of `spec`'s other dimensions closest to target_bytes
// (at least 1).
absl::StatusOr<uint32_t> LlamaCppLayersForSize(const LlamaCppSpec& spec, uint64_t target_bytes);

// The deterministic weights behind the synthetic models: n values, roughly normal with the
// given standard deviation, from (seed, stream).
std::vector<float> SyntheticWeights(uint64_t seed, uint64_t stream, size_t n, float stddev);

}  // namespace modelfs
