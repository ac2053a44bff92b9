// The GGUF <-> Hugging Face tensor name map (see tensor_names.h; sources in
// docs/tensor-names.md). The per-block names are one table; architecture differences are rows
// that apply to some architectures only.
#include "core/formats/tensor_names.h"

#include <algorithm>
#include <array>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace modelfs {
namespace {

// Our abseil's string_view is its own type.
absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

enum ArchBit : uint32_t {
  kLlama = 1,
  kMistral = 2,
  kMixtral = 4,
  kQwen2 = 8,
  kQwen3 = 16,
  kGemma = 32,
  kAll = 63,
  kLlamaLike = kLlama | kMistral | kMixtral,
  kQwen = kQwen2 | kQwen3,
};

// Which transform a row carries; kPermuteRows rows say which head count they use.
enum class Heads { kNone, kQ, kKv };

struct Row {
  const char* gguf;  // after "blk.N." for block tensors
  const char* hf;    // after "model.layers.N." for block tensors
  uint32_t archs;
  TensorTransform transform;
  Heads heads;
};

// Tensors outside the blocks.
constexpr std::array<Row, 3> kGlobal = {{
    {"token_embd.weight", "model.embed_tokens.weight", kAll, TensorTransform::kNone, Heads::kNone},
    {"output.weight", "lm_head.weight", kAll, TensorTransform::kNone, Heads::kNone},
    {"output_norm.weight", "model.norm.weight", kAll, TensorTransform::kNone, Heads::kNone},
}};

// Tensors of block N (gguf "blk.N.<gguf>", hf "model.layers.N.<hf>").
constexpr std::array<Row, 17> kBlock = {{
    {"attn_norm.weight", "input_layernorm.weight", kAll, TensorTransform::kNone, Heads::kNone},
    {"attn_q.weight", "self_attn.q_proj.weight", kLlamaLike, TensorTransform::kPermuteRows,
     Heads::kQ},
    {"attn_k.weight", "self_attn.k_proj.weight", kLlamaLike, TensorTransform::kPermuteRows,
     Heads::kKv},
    {"attn_q.weight", "self_attn.q_proj.weight", kQwen | kGemma, TensorTransform::kNone,
     Heads::kNone},
    {"attn_k.weight", "self_attn.k_proj.weight", kQwen | kGemma, TensorTransform::kNone,
     Heads::kNone},
    {"attn_v.weight", "self_attn.v_proj.weight", kAll, TensorTransform::kNone, Heads::kNone},
    {"attn_output.weight", "self_attn.o_proj.weight", kAll, TensorTransform::kNone, Heads::kNone},
    // qwen2's attention biases (not permuted: qwen2 is not permuted at all).
    {"attn_q.bias", "self_attn.q_proj.bias", kQwen2, TensorTransform::kNone, Heads::kNone},
    {"attn_k.bias", "self_attn.k_proj.bias", kQwen2, TensorTransform::kNone, Heads::kNone},
    {"attn_v.bias", "self_attn.v_proj.bias", kQwen2, TensorTransform::kNone, Heads::kNone},
    // qwen3's per-head Q/K RMSNorm.
    {"attn_q_norm.weight", "self_attn.q_norm.weight", kQwen3, TensorTransform::kNone, Heads::kNone},
    {"attn_k_norm.weight", "self_attn.k_norm.weight", kQwen3, TensorTransform::kNone, Heads::kNone},
    {"ffn_norm.weight", "post_attention_layernorm.weight", kAll, TensorTransform::kNone,
     Heads::kNone},
    {"ffn_gate.weight", "mlp.gate_proj.weight", kAll & ~kMixtral, TensorTransform::kNone,
     Heads::kNone},
    {"ffn_up.weight", "mlp.up_proj.weight", kAll & ~kMixtral, TensorTransform::kNone, Heads::kNone},
    {"ffn_down.weight", "mlp.down_proj.weight", kAll & ~kMixtral, TensorTransform::kNone,
     Heads::kNone},
    // mixtral's router; the experts are kExperts below.
    {"ffn_gate_inp.weight", "block_sparse_moe.gate.weight", kMixtral, TensorTransform::kNone,
     Heads::kNone},
}};

// mixtral: w1 is the gate projection, w2 down, w3 up (MixtralBlockSparseTop2MLP).
struct ExpertRow {
  const char* gguf;
  const char* hf;  // "block_sparse_moe.experts.E.<hf>"
};
constexpr std::array<ExpertRow, 3> kExperts = {{
    {"ffn_gate_exps.weight", "w1.weight"},
    {"ffn_down_exps.weight", "w2.weight"},
    {"ffn_up_exps.weight", "w3.weight"},
}};

constexpr std::string_view kGgufBlock = "blk.";
constexpr std::string_view kHfBlock = "model.layers.";
constexpr std::string_view kHfExperts = "block_sparse_moe.experts.";

// "12.rest" -> (12, "rest").
bool SplitIndex(std::string_view s, uint32_t* index, std::string_view* rest) {
  size_t dot = s.find('.');
  if (dot == std::string_view::npos || dot == 0) return false;
  if (!absl::SimpleAtoi(Av(s.substr(0, dot)), index)) return false;
  if (absl::StrCat(*index) != Av(s.substr(0, dot))) return false;  // no "01", "+1"
  *rest = s.substr(dot + 1);
  return true;
}

uint32_t ArchBitOf(const std::string& arch) {
  if (arch == "llama") return kLlama;
  if (arch == "mistral") return kMistral;
  if (arch == "mixtral") return kMixtral;
  if (arch == "qwen2") return kQwen2;
  if (arch == "qwen3") return kQwen3;
  if (arch == "gemma") return kGemma;
  return 0;
}

// gemma stores every RMSNorm weight + 1 (the norms of the block and the final norm).
bool GemmaNorm(std::string_view gguf_name) { return absl::EndsWith(Av(gguf_name), "norm.weight"); }

// GGUF row (h, i, j) = HF row (h, j, i); `forward` maps HF to GGUF.
absl::Status PermuteRows(const TensorMapping& m, const std::vector<uint64_t>& hf_shape,
                         std::vector<float>& values, bool forward) {
  if (hf_shape.empty() || m.heads == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", m.gguf_name, ": cannot permute a scalar or over 0 heads"));
  }
  const uint64_t rows = hf_shape[0];
  const uint64_t cols = rows == 0 ? 0 : values.size() / rows;
  if (rows % (2ull * m.heads) != 0 || rows * cols != values.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor %s: %d rows do not divide into %d heads of pairs (values %d)",
                        m.gguf_name, rows, m.heads, values.size()));
  }
  const uint64_t half = rows / m.heads / 2;
  std::vector<float> out(values.size());
  for (uint64_t h = 0; h < m.heads; ++h) {
    for (uint64_t i = 0; i < half; ++i) {
      for (uint64_t j = 0; j < 2; ++j) {
        const uint64_t gguf_row = h * 2 * half + i * 2 + j;
        const uint64_t hf_row = h * 2 * half + j * half + i;
        const uint64_t from = forward ? hf_row : gguf_row;
        const uint64_t to = forward ? gguf_row : hf_row;
        std::copy_n(values.begin() + from * cols, cols, out.begin() + to * cols);
      }
    }
  }
  values.swap(out);
  return absl::OkStatus();
}

absl::Status Apply(const TensorMapping& m, const std::vector<uint64_t>& hf_shape,
                   std::vector<float>& values, bool forward) {
  switch (m.transform) {
    case TensorTransform::kNone:
    case TensorTransform::kStackExperts:
      return absl::OkStatus();
    case TensorTransform::kAddOne:
      for (float& v : values) v = forward ? v + 1.0f : v - 1.0f;
      return absl::OkStatus();
    case TensorTransform::kPermuteRows:
      return PermuteRows(m, hf_shape, values, forward);
  }
  return absl::OkStatus();
}

}  // namespace

const char* TensorTransformName(TensorTransform t) {
  switch (t) {
    case TensorTransform::kNone:
      return "none";
    case TensorTransform::kPermuteRows:
      return "permute_rows";
    case TensorTransform::kAddOne:
      return "add_one";
    case TensorTransform::kStackExperts:
      return "stack_experts";
  }
  return "none";
}

absl::StatusOr<TensorNameMap> TensorNameMap::ForArchitecture(std::string_view architecture,
                                                             const TensorArchParams& params) {
  std::string arch = absl::AsciiStrToLower(Av(architecture));
  if (arch == "llama" && params.n_expert > 0) arch = "mixtral";
  if (ArchBitOf(arch) == 0) {
    return absl::UnimplementedError(absl::StrCat(
        "architecture '", Av(architecture),
        "' has no tensor name map (covered: llama, mistral, mixtral, qwen2, qwen3, gemma)"));
  }
  TensorArchParams p = params;
  if (p.n_head_kv == 0) p.n_head_kv = p.n_head;
  TensorNameMap map(arch, p);
  if (map.permutes_qk()) {
    if (p.n_head == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("architecture ", arch, " permutes Q/K rows: the head count is needed"));
    }
    if (p.n_head % p.n_head_kv != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "architecture %s: %d heads do not divide into %d KV heads", arch, p.n_head, p.n_head_kv));
    }
  }
  if (arch == "mixtral" && p.n_expert == 0) {
    return absl::InvalidArgumentError("architecture mixtral: the expert count is needed");
  }
  return map;
}

bool TensorNameMap::permutes_qk() const { return (ArchBitOf(architecture_) & kLlamaLike) != 0; }

std::optional<TensorMapping> TensorNameMap::FromGguf(std::string_view gguf_name) const {
  const uint32_t bit = ArchBitOf(architecture_);
  const bool gemma = bit == kGemma;
  for (const Row& r : kGlobal) {
    if ((r.archs & bit) && gguf_name == r.gguf) {
      TensorMapping m{r.gguf, {r.hf}, r.transform, 0};
      if (gemma && GemmaNorm(gguf_name)) m.transform = TensorTransform::kAddOne;
      return m;
    }
  }
  if (!absl::StartsWith(Av(gguf_name), Av(kGgufBlock))) return std::nullopt;
  uint32_t block = 0;
  std::string_view rest;
  if (!SplitIndex(gguf_name.substr(kGgufBlock.size()), &block, &rest)) return std::nullopt;
  const std::string hf_prefix = absl::StrCat(Av(kHfBlock), block, ".");
  for (const Row& r : kBlock) {
    if (!(r.archs & bit) || rest != r.gguf) continue;
    TensorMapping m{std::string(gguf_name), {absl::StrCat(hf_prefix, r.hf)}, r.transform, 0};
    if (r.heads == Heads::kQ) m.heads = params_.n_head;
    if (r.heads == Heads::kKv) m.heads = params_.n_head_kv;
    if (gemma && GemmaNorm(rest)) m.transform = TensorTransform::kAddOne;
    return m;
  }
  if (bit == kMixtral) {
    for (const ExpertRow& e : kExperts) {
      if (rest != e.gguf) continue;
      TensorMapping m{std::string(gguf_name), {}, TensorTransform::kStackExperts, 0};
      for (uint32_t x = 0; x < params_.n_expert; ++x) {
        m.hf_names.push_back(absl::StrCat(hf_prefix, Av(kHfExperts), x, ".", e.hf));
      }
      return m;
    }
  }
  return std::nullopt;
}

std::optional<TensorMapping> TensorNameMap::FromHf(std::string_view hf_name,
                                                   uint32_t* expert) const {
  if (expert != nullptr) *expert = 0;
  const uint32_t bit = ArchBitOf(architecture_);
  for (const Row& r : kGlobal) {
    if ((r.archs & bit) && hf_name == r.hf) return FromGguf(r.gguf);
  }
  if (!absl::StartsWith(Av(hf_name), Av(kHfBlock))) return std::nullopt;
  uint32_t block = 0;
  std::string_view rest;
  if (!SplitIndex(hf_name.substr(kHfBlock.size()), &block, &rest)) return std::nullopt;
  const std::string gguf_prefix = absl::StrCat(Av(kGgufBlock), block, ".");
  for (const Row& r : kBlock) {
    if ((r.archs & bit) && rest == r.hf) {
      return FromGguf(absl::StrCat(gguf_prefix, r.gguf));
    }
  }
  if (bit == kMixtral && absl::StartsWith(Av(rest), Av(kHfExperts))) {
    uint32_t x = 0;
    std::string_view leaf;
    if (!SplitIndex(rest.substr(kHfExperts.size()), &x, &leaf) || x >= params_.n_expert) {
      return std::nullopt;
    }
    for (const ExpertRow& e : kExperts) {
      if (leaf != e.hf) continue;
      if (expert != nullptr) *expert = x;
      return FromGguf(absl::StrCat(gguf_prefix, e.gguf));
    }
  }
  return std::nullopt;
}

std::vector<uint64_t> GgufDimsFromHfShape(const std::vector<uint64_t>& hf_shape) {
  return {hf_shape.rbegin(), hf_shape.rend()};
}

std::vector<uint64_t> HfShapeFromGgufDims(const std::vector<uint64_t>& gguf_dims) {
  return {gguf_dims.rbegin(), gguf_dims.rend()};
}

absl::Status HfToGgufValues(const TensorMapping& mapping, const std::vector<uint64_t>& hf_shape,
                            std::vector<float>& values) {
  return Apply(mapping, hf_shape, values, /*forward=*/true);
}

absl::Status GgufToHfValues(const TensorMapping& mapping, const std::vector<uint64_t>& hf_shape,
                            std::vector<float>& values) {
  return Apply(mapping, hf_shape, values, /*forward=*/false);
}

}  // namespace modelfs
