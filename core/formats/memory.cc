#include "core/formats/memory.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/formats/ggml_types.h"
#include "core/status/status_macros.h"
#include "core/text/number_format.h"

namespace modelfs {
namespace {

constexpr long double kGiB = 1024.0L * 1024.0L * 1024.0L;

std::string Lower(std::string_view s) {
  return absl::AsciiStrToLower(absl::string_view(s.data(), s.size()));
}

absl::StatusOr<uint64_t> Mul(uint64_t a, uint64_t b, std::string_view what) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), ": ", a, " x ", b, " overflows a 64-bit byte count"));
  }
  return r;
}

absl::StatusOr<uint64_t> Add(uint64_t a, uint64_t b, std::string_view what) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), ": ", a, " + ", b, " overflows a 64-bit byte count"));
  }
  return r;
}

bool IsFp8Alias(const std::string& lower) {
  return lower == "fp8" || lower == "f8" || lower == "fp8_e4m3" || lower == "fp8_e5m2" ||
         lower == "f8_e4m3" || lower == "f8_e5m2";
}

// Per-token cache bytes split by whether the layer slides, so the windowed figure can cap one
// part at the window without recomputing.
struct PerToken {
  uint64_t full = 0;     // layers that keep the whole context
  uint64_t sliding = 0;  // layers that keep min(ctx, window)
  uint64_t total() const { return full + sliding; }
};

absl::StatusOr<PerToken> SplitBytesPerToken(const ModelShape& shape, std::string_view kv_type) {
  ASSIGN_OR_RETURN(BlockFormat t, FindKvCacheType(kv_type));
  // Values cached per token per KV head (or per layer for MLA), which must fill whole blocks.
  uint64_t unit_bytes = 0;
  if (shape.mla) {
    if (shape.mla_kv_dim % t.block_size != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kv cache type ", t.name, " stores blocks of ", t.block_size,
          " values; the MLA latent of ", shape.mla_kv_dim, " (kv_lora_rank ", shape.kv_lora_rank,
          " + rope head dim ", shape.rope_head_dim, ") is not a multiple"));
    }
    unit_bytes = shape.mla_kv_dim / t.block_size * t.block_bytes;
  } else {
    if (shape.head_dim_k % t.block_size != 0 || shape.head_dim_v % t.block_size != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kv cache type ", t.name, " stores blocks of ", t.block_size, " values; head_dim_k ",
          shape.head_dim_k, " and head_dim_v ", shape.head_dim_v, " must both be multiples"));
    }
    ASSIGN_OR_RETURN(uint64_t k, Mul(shape.head_dim_k / t.block_size, t.block_bytes, "key row"));
    ASSIGN_OR_RETURN(uint64_t v, Mul(shape.head_dim_v / t.block_size, t.block_bytes, "value row"));
    ASSIGN_OR_RETURN(unit_bytes, Add(k, v, "key + value row"));
  }
  PerToken out;
  for (uint64_t i = 0; i < shape.layers; ++i) {
    uint64_t kv_heads = shape.KvHeadsOfLayer(i);
    if (kv_heads == 0) continue;
    uint64_t layer_bytes = unit_bytes;
    if (!shape.mla) {
      ASSIGN_OR_RETURN(layer_bytes, Mul(kv_heads, unit_bytes, "kv heads x row bytes"));
    }
    uint64_t& bucket = shape.IsSlidingLayer(i) ? out.sliding : out.full;
    ASSIGN_OR_RETURN(bucket, Add(bucket, layer_bytes, "bytes per token"));
  }
  ASSIGN_OR_RETURN(uint64_t total, Add(out.full, out.sliding, "bytes per token"));
  (void)total;
  return out;
}

absl::StatusOr<uint64_t> WindowedPerSequence(const ModelShape& shape, const PerToken& p,
                                             uint64_t ctx) {
  uint64_t window_tokens = std::min(ctx, shape.sliding_window.value_or(ctx));
  ASSIGN_OR_RETURN(uint64_t full, Mul(p.full, ctx, "kv cache per sequence"));
  ASSIGN_OR_RETURN(uint64_t sliding, Mul(p.sliding, window_tokens, "kv cache per sequence"));
  return Add(full, sliding, "kv cache per sequence");
}

long double UsableBytes(double gpu_gib, double utilization) {
  if (!(gpu_gib > 0) || !(utilization > 0)) return 0;
  return static_cast<long double>(gpu_gib) * kGiB * static_cast<long double>(utilization);
}

uint64_t FloorToU64(long double v) {
  if (!(v > 0)) return 0;
  if (v >= 18446744073709551615.0L) return std::numeric_limits<uint64_t>::max();
  return static_cast<uint64_t>(std::floor(v));
}

// How many `unit`-byte pieces fit in what the GPU leaves after the weights.
uint64_t UnitsThatFit(double gpu_gib, double utilization, uint64_t weight_bytes, uint64_t unit) {
  long double left = UsableBytes(gpu_gib, utilization) - static_cast<long double>(weight_bytes);
  if (!(left >= 0)) return 0;
  if (unit == 0) return std::numeric_limits<uint64_t>::max();
  return FloorToU64(left / static_cast<long double>(unit));
}

}  // namespace

absl::StatusOr<BlockFormat> FindKvCacheType(std::string_view name) {
  std::string lower = Lower(name);
  if (IsFp8Alias(lower)) return BlockFormat{"fp8", 1, 1};
  static constexpr const char* kGgml[] = {"f32",  "f16",  "bf16", "q8_0",  "q4_0",
                                          "q4_1", "q5_0", "q5_1", "iq4_nl"};
  for (const char* n : kGgml) {
    if (lower != n) continue;
    const GgmlType* t = FindGgmlTypeByName(n);
    if (t == nullptr) break;
    return BlockFormat{n, t->block_size, t->type_size};
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown kv cache type '", std::string(name),
                   "'; expected one of f16, bf16, fp8 (f8, fp8_e4m3, fp8_e5m2), q8_0, q4_0, "
                   "q4_1, q5_0, q5_1, iq4_nl, f32"));
}

const std::vector<std::string>& StandardKvCacheTypes() {
  static const auto* kTypes =
      new std::vector<std::string>{"f16", "bf16", "fp8", "q8_0", "q4_0", "f32"};
  return *kTypes;
}

absl::StatusOr<uint64_t> KvBytesPerToken(const ModelShape& shape, std::string_view kv_type) {
  ASSIGN_OR_RETURN(PerToken p, SplitBytesPerToken(shape, kv_type));
  return p.total();
}

absl::StatusOr<uint64_t> KvCacheBytes(const ModelShape& shape, std::string_view kv_type,
                                      uint64_t ctx, uint64_t seqs) {
  ASSIGN_OR_RETURN(uint64_t per_token, KvBytesPerToken(shape, kv_type));
  ASSIGN_OR_RETURN(uint64_t per_seq, Mul(per_token, ctx, "kv cache bytes per token x ctx"));
  return Mul(per_seq, seqs, "kv cache bytes per sequence x seqs");
}

absl::StatusOr<std::optional<uint64_t>> WindowedKvCacheBytes(const ModelShape& shape,
                                                             std::string_view kv_type, uint64_t ctx,
                                                             uint64_t seqs) {
  ASSIGN_OR_RETURN(PerToken p, SplitBytesPerToken(shape, kv_type));
  if (!shape.sliding_window.has_value() || p.sliding == 0) return std::optional<uint64_t>();
  ASSIGN_OR_RETURN(uint64_t per_seq, WindowedPerSequence(shape, p, ctx));
  ASSIGN_OR_RETURN(uint64_t total, Mul(per_seq, seqs, "windowed kv cache x seqs"));
  return std::optional<uint64_t>(total);
}

absl::StatusOr<BlockFormat> FindWeightFormat(std::string_view name) {
  std::string lower = Lower(name);
  if (IsFp8Alias(lower)) return BlockFormat{"FP8", 1, 1};
  const GgmlType* t = FindGgmlTypeByName(name);
  if (t != nullptr && !t->removed && t->block_size > 0) {
    return BlockFormat{t->name, t->block_size, t->type_size};
  }
  // llama.cpp file types (Q4_K_M, Q5_K_S, Q3_K_L, Q2_K_S, IQ4_XS is a real type) are recipes.
  if (lower.size() > 2 && lower[lower.size() - 2] == '_' &&
      (lower.back() == 's' || lower.back() == 'm' || lower.back() == 'l')) {
    std::string base = absl::AsciiStrToUpper(lower.substr(0, lower.size() - 2));
    if (FindGgmlTypeByName(base) != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("weight format '", std::string(name),
                       "' is a llama.cpp file-type recipe that mixes tensor types; size it as ",
                       base, " for an estimate, or inspect the file for the exact bytes"));
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown weight format '", std::string(name),
                                                 "'; expected a ggml type such as ",
                                                 absl::StrJoin(StandardWeightFormats(), ", ")));
}

const std::vector<std::string>& StandardWeightFormats() {
  static const auto* kFormats = new std::vector<std::string>{
      "F32", "F16", "BF16", "Q8_0", "Q6_K", "Q5_K", "Q5_0", "Q4_K", "Q4_0", "Q3_K", "Q2_K", "FP8"};
  return *kFormats;
}

absl::StatusOr<uint64_t> WeightBytes(uint64_t params, std::string_view format) {
  ASSIGN_OR_RETURN(BlockFormat f, FindWeightFormat(format));
  uint64_t blocks = params / f.block_size + (params % f.block_size != 0 ? 1 : 0);
  return Mul(blocks, f.block_bytes, absl::StrCat(params, " params in ", f.name));
}

absl::StatusOr<uint64_t> ParseParamCount(std::string_view text) {
  const std::string original(text);
  std::string s = original;
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter count '", original, "': ", std::string(why)));
  };
  if (s.empty()) return bad("empty");
  long double scale = 1;
  switch (absl::ascii_tolower(static_cast<unsigned char>(s.back()))) {
    case 'k':
      scale = 1e3L;
      break;
    case 'm':
      scale = 1e6L;
      break;
    case 'b':
    case 'g':
      scale = 1e9L;
      break;
    case 't':
      scale = 1e12L;
      break;
    default:
      break;
  }
  if (scale != 1) s.pop_back();
  if (s.empty() || !(absl::ascii_isdigit(static_cast<unsigned char>(s[0])) || s[0] == '.')) {
    return bad("expected a number such as 8.03e9, 8B or 134.5M");
  }
  errno = 0;
  char* end = nullptr;
  long double v = std::strtold(s.c_str(), &end);
  if (end != s.c_str() + s.size() || errno == ERANGE) {
    return bad("expected a number such as 8.03e9, 8B or 134.5M");
  }
  v = std::nearbyint(v * scale);
  if (!(v >= 1) || v >= 18446744073709551615.0L) return bad("out of range");
  return static_cast<uint64_t>(v);
}

uint64_t KvBudgetBytes(double gpu_gib, double utilization, uint64_t weight_bytes) {
  long double left = UsableBytes(gpu_gib, utilization) - static_cast<long double>(weight_bytes);
  return FloorToU64(left);
}

uint64_t TokensThatFit(double gpu_gib, double utilization, uint64_t weight_bytes,
                       uint64_t kv_bytes_per_token) {
  return UnitsThatFit(gpu_gib, utilization, weight_bytes, kv_bytes_per_token);
}

uint64_t SequencesThatFit(double gpu_gib, double utilization, uint64_t weight_bytes,
                          uint64_t kv_bytes_per_sequence) {
  return UnitsThatFit(gpu_gib, utilization, weight_bytes, kv_bytes_per_sequence);
}

absl::StatusOr<MemoryReport> ComputeMemoryReport(const MemoryRequest& request) {
  MemoryReport r;
  r.shape = request.shape;
  r.params = request.params;
  r.seqs = request.seqs;
  r.ctx = request.ctx != 0 ? request.ctx : request.shape.context;
  r.notes = request.shape.notes;
  if (r.ctx == 0) {
    return absl::InvalidArgumentError(
        "no context length: pass ctx (the model states no max_position_embeddings or "
        "context_length)");
  }
  if (r.seqs == 0) return absl::InvalidArgumentError("seqs is 0; at least one sequence runs");
  if (request.shape.context != 0 && r.ctx > request.shape.context) {
    r.notes.push_back(absl::StrCat("ctx ", WithCommas(r.ctx),
                                   " is longer than the model's trained ", "context of ",
                                   WithCommas(request.shape.context)));
  }

  if (request.file_tensor_bytes.has_value()) {
    WeightEstimate w;
    w.format = request.file_label.empty() ? "file" : request.file_label;
    w.bytes = *request.file_tensor_bytes;
    w.from_file = true;
    if (request.params.has_value() && *request.params > 0) {
      w.bits_per_weight = 8.0 * static_cast<double>(w.bytes) / static_cast<double>(*request.params);
    }
    r.weights.push_back(std::move(w));
  }
  std::vector<std::string> quants = request.quants;
  if (!quants.empty() && !request.params.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight sizes for ", absl::StrJoin(quants, ", "), " need a parameter count"));
  }
  bool explicit_quants = !quants.empty();
  if (quants.empty() && request.params.has_value()) quants = StandardWeightFormats();
  for (const std::string& q : quants) {
    ASSIGN_OR_RETURN(BlockFormat f, FindWeightFormat(q));
    ASSIGN_OR_RETURN(uint64_t bytes, WeightBytes(*request.params, q));
    r.weights.push_back(WeightEstimate{f.name, bytes, f.bits_per_value(), false});
  }

  const std::vector<std::string>& kv_types =
      request.kv_types.empty() ? StandardKvCacheTypes() : request.kv_types;
  for (const std::string& name : kv_types) {
    ASSIGN_OR_RETURN(BlockFormat t, FindKvCacheType(name));
    ASSIGN_OR_RETURN(PerToken p, SplitBytesPerToken(r.shape, name));
    KvEstimate e;
    e.kv_type = t.name;
    e.bytes_per_token = p.total();
    ASSIGN_OR_RETURN(e.bytes_per_sequence, Mul(e.bytes_per_token, r.ctx, "kv cache x ctx"));
    ASSIGN_OR_RETURN(e.bytes, Mul(e.bytes_per_sequence, r.seqs, "kv cache x seqs"));
    if (r.shape.sliding_window.has_value() && p.sliding > 0) {
      ASSIGN_OR_RETURN(uint64_t per_seq, WindowedPerSequence(r.shape, p, r.ctx));
      ASSIGN_OR_RETURN(uint64_t total, Mul(per_seq, r.seqs, "windowed kv cache x seqs"));
      e.windowed_bytes_per_sequence = per_seq;
      e.windowed_bytes = total;
    }
    r.kv.push_back(std::move(e));
  }

  if (request.gpu_gib.has_value()) {
    if (!(*request.gpu_gib > 0) || !std::isfinite(*request.gpu_gib)) {
      return absl::InvalidArgumentError(
          absl::StrCat("gpu size ", *request.gpu_gib, " GiB is not a positive number"));
    }
    if (!(request.utilization > 0 && request.utilization <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("gpu utilization ", request.utilization, " is outside (0, 1]"));
    }
    r.gpu_gib = request.gpu_gib;
    r.utilization = request.utilization;
    r.gpu_usable_bytes = FloorToU64(UsableBytes(*r.gpu_gib, r.utilization));
    for (const WeightEstimate& w : r.weights) {
      if (request.file_tensor_bytes.has_value() && !w.from_file && !explicit_quants) continue;
      for (const KvEstimate& e : r.kv) {
        FitEstimate f;
        f.weights = w.format;
        f.kv_type = e.kv_type;
        f.weight_bytes = w.bytes;
        f.weights_fit = static_cast<long double>(w.bytes) <= UsableBytes(*r.gpu_gib, r.utilization);
        f.kv_budget_bytes = KvBudgetBytes(*r.gpu_gib, r.utilization, w.bytes);
        f.tokens = TokensThatFit(*r.gpu_gib, r.utilization, w.bytes, e.bytes_per_token);
        f.sequences = SequencesThatFit(*r.gpu_gib, r.utilization, w.bytes, e.bytes_per_sequence);
        if (e.windowed_bytes_per_sequence.has_value()) {
          f.windowed_sequences =
              SequencesThatFit(*r.gpu_gib, r.utilization, w.bytes, *e.windowed_bytes_per_sequence);
        }
        f.request_fits = f.weights_fit && f.sequences >= r.seqs;
        r.fits.push_back(std::move(f));
      }
    }
    if (r.weights.empty()) {
      r.notes.push_back(
          "no weight figure (give a parameter count or model files): fit not computed");
    }
  }
  r.notes.push_back(
      "runtime buffers, activations and the CUDA context come on top of weights and KV cache");
  return r;
}

}  // namespace modelfs
