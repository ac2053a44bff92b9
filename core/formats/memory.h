// Serving-memory arithmetic: weight bytes per storage format, KV-cache bytes per token and for a
// context x sequences request (with a sliding-window variant), and how many tokens and
// sequences fit on a GPU. Also the report `modelfs memory` prints, as text and as JSON.
//
// All byte counts are exact integers; multiplication overflow is an error, never a wrap.
// Thread safety: pure functions over values; safe to call from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>
#include "absl/status/statusor.h"
#include "core/formats/model_shape.h"

namespace modelfs {

// vLLM's --gpu-memory-utilization default: the share of the GPU a server may take.
inline constexpr double kDefaultGpuUtilization = 0.9;

// A storage format as blocks: block_bytes bytes hold block_size values (F16: 1/2, Q8_0: 32/34).
struct BlockFormat {
  std::string name;  // canonical: weights "Q4_K", "F16", "FP8"; KV cache "f16", "q8_0", "fp8"
  uint32_t block_size = 1;
  uint32_t block_bytes = 0;
  double bits_per_value() const { return 8.0 * block_bytes / block_size; }
};

// KV-cache element types: f32, f16, bf16, fp8 (aliases f8, fp8_e4m3, fp8_e5m2, f8_e4m3,
// f8_e5m2), q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl. Case-insensitive.
// Errors: kInvalidArgument naming the type and the accepted ones.
absl::StatusOr<BlockFormat> FindKvCacheType(std::string_view name);
// The types a report shows by default, in order: f16, bf16, fp8, q8_0, q4_0, f32.
const std::vector<std::string>& StandardKvCacheTypes();

// KV-cache bytes one token costs across all layers that hold a cache:
//   sum over those layers of kv_heads(layer) x (head_dim_k + head_dim_v) values, or for MLA
//   mla_kv_dim values per layer; a block type stores block_bytes per block_size values.
// Errors: kInvalidArgument for an unknown type, for head dims (or the MLA latent) that are not a
// multiple of the type's block size (naming the dims), or on overflow.
absl::StatusOr<uint64_t> KvBytesPerToken(const ModelShape& shape, std::string_view kv_type);

// The headline cache: KvBytesPerToken x ctx x seqs, as if every layer kept the full context.
absl::StatusOr<uint64_t> KvCacheBytes(const ModelShape& shape, std::string_view kv_type,
                                      uint64_t ctx, uint64_t seqs);

// The cache when sliding-window layers keep only min(ctx, window) tokens and the others keep
// ctx. nullopt when the shape has no window or no layer uses it.
absl::StatusOr<std::optional<uint64_t>> WindowedKvCacheBytes(const ModelShape& shape,
                                                             std::string_view kv_type, uint64_t ctx,
                                                             uint64_t seqs);

// Weight formats: any ggml tensor type by name ("Q4_K", "q8_0", "BF16", ...) plus FP8 (one byte
// per weight; aliases F8, F8_E4M3, F8_E5M2, FP8_E4M3, FP8_E5M2). Case-insensitive.
// Errors: kInvalidArgument for an unknown name; a llama.cpp file-type recipe such as Q4_K_M is
// refused with a hint, because it mixes tensor types and has no single size.
absl::StatusOr<BlockFormat> FindWeightFormat(std::string_view name);
// F32, F16, BF16, Q8_0, Q6_K, Q5_K, Q5_0, Q4_K, Q4_0, Q3_K, Q2_K, FP8.
const std::vector<std::string>& StandardWeightFormats();
// ceil(params / block_size) x block_bytes: the size if every weight were stored in `format`.
// 8.03e9 params in Q4_K -> 4,516,875,072. Errors: unknown format, overflow.
absl::StatusOr<uint64_t> WeightBytes(uint64_t params, std::string_view format);

// Parses a parameter count: "8030000000", "8.03e9", "8B", "8.03b", "134.5M", "950k".
// The result is rounded to the nearest integer. Errors: kInvalidArgument naming the text.
absl::StatusOr<uint64_t> ParseParamCount(std::string_view text);

// Bytes left for the KV cache: floor(gpu_gib x 2^30 x utilization) - weight_bytes, 0 when the
// weights alone do not fit (or gpu_gib / utilization are not positive).
uint64_t KvBudgetBytes(double gpu_gib, double utilization, uint64_t weight_bytes);
// floor((gpu_gib x 2^30 x utilization - weight_bytes) / kv_bytes_per_token); 0 when the weights
// do not fit; UINT64_MAX when kv_bytes_per_token is 0 (no KV cache) and the weights fit.
// 24 GiB, 0.9, 4,516,875,072 weight bytes, 131,072 bytes/token -> 142,486.
uint64_t TokensThatFit(double gpu_gib, double utilization, uint64_t weight_bytes,
                       uint64_t kv_bytes_per_token);
// The same for whole sequences of kv_bytes_per_sequence (bytes per token x ctx, or a windowed
// per-sequence figure). 142,486 tokens at ctx 32,768 -> 4 sequences.
uint64_t SequencesThatFit(double gpu_gib, double utilization, uint64_t weight_bytes,
                          uint64_t kv_bytes_per_sequence);

struct MemoryRequest {
  ModelShape shape;
  std::optional<uint64_t> params;  // parameter count, for per-format weight sizes
  // Weight formats to size from params. Empty with params set: StandardWeightFormats().
  std::vector<std::string> quants;
  // Exact tensor bytes read from the model files' headers, when known.
  std::optional<uint64_t> file_tensor_bytes;
  std::string file_label = "file";  // how the exact figure is labelled ("model.gguf", "Q8_0")
  uint64_t ctx = 0;                 // 0: the shape's trained context
  uint64_t seqs = 1;
  std::vector<std::string> kv_types = {"f16"};  // empty: StandardKvCacheTypes()
  std::optional<double> gpu_gib;
  double utilization = kDefaultGpuUtilization;
};

struct WeightEstimate {
  std::string format;  // canonical format name, or file_label for the exact figure
  uint64_t bytes = 0;
  std::optional<double> bits_per_weight;  // unknown for file bytes without a parameter count
  bool from_file = false;
};

struct KvEstimate {
  std::string kv_type;  // canonical ("f16", "fp8", "q8_0")
  uint64_t bytes_per_token = 0;
  uint64_t bytes_per_sequence = 0;  // bytes_per_token x ctx
  uint64_t bytes = 0;               // bytes_per_sequence x seqs: the headline
  // Present when sliding-window layers exist: those layers capped at the window.
  std::optional<uint64_t> windowed_bytes_per_sequence;
  std::optional<uint64_t> windowed_bytes;
};

struct FitEstimate {
  std::string weights;  // WeightEstimate::format
  std::string kv_type;
  uint64_t weight_bytes = 0;
  bool weights_fit = false;
  uint64_t kv_budget_bytes = 0;  // usable GPU bytes minus weights
  uint64_t tokens = 0;           // TokensThatFit
  uint64_t sequences = 0;        // whole sequences of ctx tokens
  std::optional<uint64_t> windowed_sequences;
  bool request_fits = false;  // weights + ctx x seqs cache fit in the usable bytes
};

struct MemoryReport {
  ModelShape shape;
  std::optional<uint64_t> params;
  uint64_t ctx = 0;
  uint64_t seqs = 0;
  std::vector<WeightEstimate> weights;
  std::vector<KvEstimate> kv;
  std::optional<double> gpu_gib;
  double utilization = kDefaultGpuUtilization;
  uint64_t gpu_usable_bytes = 0;   // floor(gpu_gib x 2^30 x utilization); 0 without a GPU
  std::vector<FitEstimate> fits;   // empty without a GPU or without any weight figure
  std::vector<std::string> notes;  // the shape's notes, then the request's
};

// Combines the above. Fits are computed for the file figure and the explicitly requested
// quants when a file figure is given, otherwise for every weight line; each against every KV
// type. Errors: kInvalidArgument for no context length (ctx 0 and none in the shape), seqs 0,
// quants without params, unknown formats or KV types, head dims a block KV type cannot hold,
// a non-positive GPU size, utilization outside (0, 1], or overflow.
absl::StatusOr<MemoryReport> ComputeMemoryReport(const MemoryRequest& request);

// The report's JSON and text forms are the CLI's: cmd/modelfs/memory_render.h.

}  // namespace modelfs
