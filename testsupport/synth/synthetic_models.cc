#include "testsupport/synth/synthetic_models.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/formats/dequant.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

constexpr uint32_t kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ8_0 = 8, kQ4_K = 12;

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::string F32Bytes(const std::vector<float>& v) {
  std::string out(v.size() * 4, '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], 4);
    for (int k = 0; k < 4; ++k) out[i * 4 + k] = static_cast<char>((bits >> (8 * k)) & 0xff);
  }
  return out;
}

std::string F16Bytes(const std::vector<float>& v) {
  std::string out(v.size() * 2, '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = FloatToHalf(v[i]);
    out[i * 2] = static_cast<char>(h & 0xff);
    out[i * 2 + 1] = static_cast<char>(h >> 8);
  }
  return out;
}

// Weights of type_id for `elements` values from (seed, stream); norms are centred on 1.
absl::StatusOr<std::string> WeightBytes(uint32_t type_id, uint64_t seed, uint64_t stream,
                                        uint64_t elements, bool norm) {
  std::vector<float> w = SyntheticWeights(seed, stream, elements, norm ? 0.05f : 0.02f);
  if (norm) {
    for (float& x : w) x += 1.0f;
  }
  switch (type_id) {
    case kF32:
      return F32Bytes(w);
    case kF16:
      return F16Bytes(w);
    case kQ8_0:
      return QuantizeQ8_0(w);
    case kQ4_0:
      return QuantizeQ4_0(w);
    case kQ4_K:
      return QuantizeQ4_K(w);
    default:
      return absl::InternalError(absl::StrCat("synthetic weights: no encoder for type ", type_id));
  }
}

void SetTokenizer(GgufWriter& w, uint32_t vocab) {
  static constexpr const char* kSpecial[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  tokens.reserve(vocab);
  types.reserve(vocab);
  for (uint32_t i = 0; i < vocab; ++i) {
    if (i < 3) {
      tokens.emplace_back(kSpecial[i]);
      types.push_back(3);  // CONTROL
    } else {
      tokens.push_back(absl::StrCat("tok", i));
      types.push_back(1);  // NORMAL
    }
  }
  w.SetString("tokenizer.ggml.model", "gpt2");
  w.SetString("tokenizer.ggml.pre", "smollm");
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetInt32Array("tokenizer.ggml.token_type", types);
  w.SetUint32("tokenizer.ggml.bos_token_id", 1);
  w.SetUint32("tokenizer.ggml.eos_token_id", 2);
  w.SetUint32("tokenizer.ggml.unknown_token_id", 0);
  w.SetUint32("tokenizer.ggml.padding_token_id", 2);
  w.SetString("tokenizer.chat_template",
              "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
              "{{ message['content'] }}<|im_end|>\n{% endfor %}"
              "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}");
  w.SetBool("tokenizer.ggml.add_bos_token", false);
}

// SentencePiece-style vocabulary (llama.cpp's LLAMA_VOCAB_TYPE_SPM): <unk>, <s>, </s>, the
// byte-fallback tokens, then "\u2581"-prefixed and bare pieces of letters, all distinct.
void SetSpmTokenizer(GgufWriter& w, uint32_t vocab) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};  // UNKNOWN, CONTROL, CONTROL
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(absl::StrFormat("<0x%02X>", b));
    types.push_back(6);  // BYTE
  }
  const std::string space = "\xe2\x96\x81";  // U+2581, SentencePiece's word boundary
  std::vector<std::string> pieces = {space};
  for (char a = 'a'; a <= 'z'; ++a) {
    pieces.push_back(space + a);
    pieces.push_back(std::string(1, a));
  }
  for (char a = 'a'; a <= 'z' && tokens.size() + pieces.size() < vocab; ++a) {
    for (char b = 'a'; b <= 'z'; ++b) {
      pieces.push_back(space + a + b);
      pieces.push_back(std::string{a, b});
    }
  }
  for (size_t i = 0; tokens.size() < vocab; ++i) {
    tokens.push_back(i < pieces.size() ? pieces[i] : absl::StrCat("tok", i));
    types.push_back(1);  // NORMAL
  }
  std::vector<float> scores(vocab, 0.0f);
  for (uint32_t i = 259; i < vocab; ++i) scores[i] = -static_cast<float>(i - 259);
  w.SetString("tokenizer.ggml.model", "llama");
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetFloat32Array("tokenizer.ggml.scores", scores);
  w.SetInt32Array("tokenizer.ggml.token_type", types);
  w.SetUint32("tokenizer.ggml.bos_token_id", 1);
  w.SetUint32("tokenizer.ggml.eos_token_id", 2);
  w.SetUint32("tokenizer.ggml.unknown_token_id", 0);
  w.SetBool("tokenizer.ggml.add_bos_token", true);
  w.SetBool("tokenizer.ggml.add_eos_token", false);
}

struct LlamaShape {
  uint32_t layers, embedding, heads, kv_heads, ffn, vocab, context;
};

void SetLlamaMetadata(GgufWriter& w, const LlamaShape& s, const std::string& name,
                      uint32_t file_type) {
  w.SetString("general.architecture", "llama");
  w.SetString("general.type", "model");
  w.SetString("general.name", name);
  w.SetUint32("llama.block_count", s.layers);
  w.SetUint32("llama.context_length", s.context);
  w.SetUint32("llama.embedding_length", s.embedding);
  w.SetUint32("llama.feed_forward_length", s.ffn);
  w.SetUint32("llama.attention.head_count", s.heads);
  w.SetUint32("llama.attention.head_count_kv", s.kv_heads);
  w.SetFloat32("llama.rope.freq_base", 100000.0f);
  w.SetFloat32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.SetUint32("general.file_type", file_type);
  w.SetUint32("llama.vocab_size", s.vocab);
  w.SetUint32("llama.rope.dimension_count", s.embedding / s.heads);
}

struct TensorPlan {
  std::string name;
  std::vector<uint64_t> dims;
  uint32_t type;
  bool norm;
};

std::vector<TensorPlan> LlamaTensors(const LlamaShape& s, uint32_t embd_type, uint32_t attn_type,
                                     uint32_t ffn_type, std::optional<uint32_t> output_type) {
  const uint64_t e = s.embedding;
  const uint64_t kv = static_cast<uint64_t>(s.embedding) / s.heads * s.kv_heads;
  std::vector<TensorPlan> plan;
  plan.push_back({"token_embd.weight", {e, s.vocab}, embd_type, false});
  for (uint32_t l = 0; l < s.layers; ++l) {
    const std::string p = absl::StrCat("blk.", l, ".");
    plan.push_back({p + "attn_norm.weight", {e}, kF32, true});
    plan.push_back({p + "ffn_down.weight", {s.ffn, e}, ffn_type, false});
    plan.push_back({p + "ffn_gate.weight", {e, s.ffn}, ffn_type, false});
    plan.push_back({p + "ffn_up.weight", {e, s.ffn}, ffn_type, false});
    plan.push_back({p + "ffn_norm.weight", {e}, kF32, true});
    plan.push_back({p + "attn_k.weight", {e, kv}, attn_type, false});
    plan.push_back({p + "attn_output.weight", {e, e}, attn_type, false});
    plan.push_back({p + "attn_q.weight", {e, e}, attn_type, false});
    plan.push_back({p + "attn_v.weight", {e, kv}, attn_type, false});
  }
  plan.push_back({"output_norm.weight", {e}, kF32, true});
  if (output_type) plan.push_back({"output.weight", {e, s.vocab}, *output_type, false});
  return plan;
}

uint64_t Elements(const std::vector<uint64_t>& dims) {
  uint64_t n = 1;
  for (uint64_t d : dims) n *= d;
  return n;
}

absl::Status CheckLlamaCppSpec(const LlamaCppSpec& spec) {
  const GgmlType* type = FindGgmlType(spec.weight_type);
  if (type == nullptr ||
      (spec.weight_type != kF16 && spec.weight_type != kQ8_0 && spec.weight_type != kQ4_K)) {
    return absl::InvalidArgumentError(absl::StrCat("llama.cpp model: weight type ",
                                                   spec.weight_type,
                                                   " is not one of F16 (1), Q8_0 (8), Q4_K (12)"));
  }
  const uint32_t row = std::max<uint32_t>(32, type->block_size);
  if (spec.layers == 0 || spec.heads == 0 || spec.kv_heads == 0 ||
      spec.embedding % spec.heads != 0 || spec.heads % spec.kv_heads != 0 ||
      spec.embedding % row != 0 || spec.ffn % row != 0 || spec.ffn == 0 || spec.vocab < 259) {
    return absl::InvalidArgumentError(absl::StrCat(
        "llama.cpp model: embedding and ffn must be multiples of ", row, " for ", type->name,
        ", embedding of heads, heads of kv_heads, layers at least 1 and vocab at least 259"));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<float> SyntheticWeights(uint64_t seed, uint64_t stream, size_t n, float stddev) {
  uint64_t state = seed * 0x100000001b3ull ^ (stream + 1) * 0x9e3779b97f4a7c15ull;
  std::vector<float> out(n);
  // Sum of four 16-bit uniforms (Irwin-Hall): close enough to normal, one PRNG call per value.
  constexpr float kScale = 1.0f / 65536.0f;
  const float norm = stddev * std::sqrt(3.0f);  // var of the sum of 4 U(0,1) is 1/3
  for (size_t i = 0; i < n; ++i) {
    const uint64_t r = SplitMix64(state);
    const float u =
        static_cast<float>((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48)) *
        kScale;
    out[i] = (u - 2.0f) * norm;
  }
  return out;
}

absl::StatusOr<GgufWriter> MakeSmolLm2Q8Writer(bool sparse_data) {
  const LlamaShape s{30, 576, 9, 3, 1536, 49152, 8192};
  GgufWriter w;
  SetLlamaMetadata(w, s, "SmolLM2 135M Instruct", 7);  // 7 = MOSTLY_Q8_0
  w.SetString("general.finetune", "Instruct");
  w.SetString("general.basename", "SmolLM2");
  w.SetString("general.size_label", "135M");
  w.SetString("general.license", "apache-2.0");
  SetTokenizer(w, s.vocab);
  w.SetUint32("general.quantization_version", 2);

  constexpr uint64_t kSeed = 135;
  uint64_t stream = 0;
  for (TensorPlan& t : LlamaTensors(s, kQ8_0, kQ8_0, kQ8_0, std::nullopt)) {
    if (sparse_data) {
      RETURN_IF_ERROR(w.AddSparseTensor(t.name, t.dims, t.type));
      continue;
    }
    const uint64_t elements = Elements(t.dims);
    RETURN_IF_ERROR(w.AddGeneratedTensor(t.name, t.dims, t.type,
                                         [type = t.type, norm = t.norm, elements, s = stream++] {
                                           return WeightBytes(type, kSeed, s, elements, norm);
                                         }));
  }
  return w;
}

absl::Status WriteSmolLm2Q8Gguf(const std::string& path, bool sparse_data) {
  ASSIGN_OR_RETURN(GgufWriter w, MakeSmolLm2Q8Writer(sparse_data));
  return w.WriteFile(path);
}

absl::StatusOr<GgufWriter> MakeTinyLlamaWriter(const TinyLlamaSpec& spec) {
  if (spec.heads == 0 || spec.kv_heads == 0 || spec.embedding % spec.heads != 0 ||
      spec.embedding % 32 != 0 || spec.ffn % 32 != 0 || spec.heads % spec.kv_heads != 0) {
    return absl::InvalidArgumentError(
        "tiny llama: embedding and ffn must be multiples of 32, embedding of heads, heads of "
        "kv_heads");
  }
  const LlamaShape s{spec.layers, spec.embedding, spec.heads,  spec.kv_heads,
                     spec.ffn,    spec.vocab,     spec.context};
  GgufWriter w;
  w.SetVersion(spec.version);
  SetLlamaMetadata(w, s, "Tiny Llama (synthetic)", 2);  // 2 = MOSTLY_Q4_0
  SetTokenizer(w, spec.vocab);
  w.SetUint32("general.quantization_version", 2);
  uint64_t stream = 0;
  for (TensorPlan& t : LlamaTensors(s, kF16, kQ8_0, kQ4_0, kF16)) {
    ASSIGN_OR_RETURN(std::string bytes,
                     WeightBytes(t.type, spec.seed, stream++, Elements(t.dims), t.norm));
    RETURN_IF_ERROR(w.AddTensor(t.name, t.dims, t.type, std::move(bytes)));
  }
  return w;
}

absl::Status WriteTinyLlamaGguf(const std::string& path, const TinyLlamaSpec& spec) {
  ASSIGN_OR_RETURN(GgufWriter w, MakeTinyLlamaWriter(spec));
  return w.WriteFile(path);
}

absl::StatusOr<GgufWriter> MakeLlamaCppWriter(const LlamaCppSpec& spec) {
  RETURN_IF_ERROR(CheckLlamaCppSpec(spec));
  const LlamaShape s{spec.layers, spec.embedding, spec.heads,  spec.kv_heads,
                     spec.ffn,    spec.vocab,     spec.context};
  // general.file_type as llama.cpp's llama_ftype numbers it.
  const uint32_t file_type = spec.weight_type == kF16 ? 1 : spec.weight_type == kQ8_0 ? 7 : 15;
  GgufWriter w;
  SetLlamaMetadata(w, s,
                   absl::StrCat("modelfs synthetic llama ", FindGgmlType(spec.weight_type)->name),
                   file_type);
  SetSpmTokenizer(w, spec.vocab);
  w.SetUint32("general.quantization_version", 2);
  uint64_t stream = 0;
  for (TensorPlan& t :
       LlamaTensors(s, kF16, spec.weight_type, spec.weight_type, spec.weight_type)) {
    const uint64_t elements = Elements(t.dims);
    RETURN_IF_ERROR(w.AddGeneratedTensor(
        t.name, t.dims, t.type,
        [type = t.type, norm = t.norm, elements, seed = spec.seed, st = stream++] {
          return WeightBytes(type, seed, st, elements, norm);
        }));
  }
  return w;
}

absl::Status WriteLlamaCppGguf(const std::string& path, const LlamaCppSpec& spec) {
  ASSIGN_OR_RETURN(GgufWriter w, MakeLlamaCppWriter(spec));
  return w.WriteFile(path);
}

absl::StatusOr<uint32_t> LlamaCppLayersForSize(const LlamaCppSpec& spec, uint64_t target_bytes) {
  LlamaCppSpec one = spec, two = spec;
  one.layers = 1;
  two.layers = 2;
  ASSIGN_OR_RETURN(GgufWriter w1, MakeLlamaCppWriter(one));
  ASSIGN_OR_RETURN(GgufWriter w2, MakeLlamaCppWriter(two));
  ASSIGN_OR_RETURN(uint64_t size1, w1.FileSize());
  ASSIGN_OR_RETURN(uint64_t size2, w2.FileSize());
  const uint64_t per_layer = size2 - size1;
  if (target_bytes <= size1) return 1u;
  return static_cast<uint32_t>(
      std::min<uint64_t>(UINT32_MAX, 1 + (target_bytes - size1 + per_layer / 2) / per_layer));
}

}  // namespace modelfs
