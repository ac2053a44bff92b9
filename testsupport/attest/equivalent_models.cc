// The tiny llama of equivalent_models.h: one value generator, two writers.
#include "testsupport/attest/equivalent_models.h"

#include <cstring>
#include <functional>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/formats/dequant.h"
#include "core/formats/gguf_writer.h"
#include "core/formats/safetensors.h"
#include "core/formats/tensor_names.h"

namespace modelfs::testing {
namespace {

struct Spec {
  std::string name;
  std::vector<uint64_t> shape;
};

std::vector<Spec> Tensors() {
  std::vector<Spec> out = {{"model.embed_tokens.weight", {32, 64}}};
  for (int b = 0; b < 2; ++b) {
    const std::string p = absl::StrCat("model.layers.", b, ".");
    out.push_back({p + "input_layernorm.weight", {64}});
    out.push_back({p + "self_attn.q_proj.weight", {64, 64}});
    out.push_back({p + "self_attn.k_proj.weight", {32, 64}});
    out.push_back({p + "self_attn.v_proj.weight", {32, 64}});
    out.push_back({p + "self_attn.o_proj.weight", {64, 64}});
    out.push_back({p + "post_attention_layernorm.weight", {64}});
    out.push_back({p + "mlp.gate_proj.weight", {128, 64}});
    out.push_back({p + "mlp.up_proj.weight", {128, 64}});
    out.push_back({p + "mlp.down_proj.weight", {64, 128}});
  }
  out.push_back({"model.norm.weight", {64}});
  out.push_back({"lm_head.weight", {32, 64}});
  return out;
}

uint64_t Elements(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

// Weights ~ N(0, 0.02), norms ~ 1 + N(0, 0.05), rounded through bf16 (the source's precision).
std::vector<float> Values(const Spec& t, const TinyLlamaOptions& o) {
  const uint32_t seed = t.name == o.replace_tensor ? o.seed + 1000 : o.seed;
  std::seed_seq seq{seed, static_cast<uint32_t>(std::hash<std::string>()(t.name))};
  std::mt19937 gen(seq);
  const bool norm = t.shape.size() == 1;
  std::normal_distribution<float> dist(norm ? 1.0f : 0.0f, norm ? 0.05f : 0.02f);
  std::vector<float> v(Elements(t.shape));
  for (float& x : v) x = Bf16ToFloat(FloatToBf16(dist(gen)));
  return v;
}

std::string Encode(const std::vector<float>& v, const std::string& dtype) {
  std::string out;
  if (dtype == "F32") {
    out.resize(v.size() * 4);
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  }
  out.resize(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = dtype == "F16" ? FloatToHalf(v[i]) : FloatToBf16(v[i]);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

}  // namespace

absl::Status WriteEquivalenceSafetensors(const std::string& path, const TinyLlamaOptions& o) {
  SafetensorsWriter w;
  for (const Spec& t : Tensors()) {
    if (t.name == o.drop_tensor) continue;
    absl::Status s = w.AddTensor(t.name, o.dtype, t.shape, Encode(Values(t, o), o.dtype));
    if (!s.ok()) return s;
  }
  return w.WriteFile(path);
}

absl::Status WriteEquivalenceGguf(const std::string& path, const TinyLlamaOptions& o) {
  auto map = TensorNameMap::ForArchitecture("llama", {kTinyLlamaHeads, kTinyLlamaKvHeads, 0});
  if (!map.ok()) return map.status();
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetString("general.name", "tiny-llama");
  w.SetUint32("llama.block_count", 2);
  w.SetUint32("llama.embedding_length", 64);
  w.SetUint32("llama.feed_forward_length", 128);
  w.SetUint32("llama.attention.head_count", kTinyLlamaHeads);
  w.SetUint32("llama.attention.head_count_kv", kTinyLlamaKvHeads);
  const GgmlType* f32 = FindGgmlTypeByName("F32");
  const GgmlType* wtype = FindGgmlTypeByName(o.gguf_type);
  if (wtype == nullptr) return absl::InvalidArgumentError(o.gguf_type);
  for (const Spec& t : Tensors()) {
    if (t.name == o.drop_tensor) continue;
    auto m = map->FromHf(t.name);
    if (!m) return absl::InternalError(absl::StrCat("no GGUF name for ", t.name));
    std::vector<float> v = Values(t, o);
    if (m->transform != TensorTransform::kPermuteRows || o.permute_qk) {
      absl::Status s = HfToGgufValues(*m, t.shape, v);
      if (!s.ok()) return s;
    }
    const GgmlType* type = t.shape.size() == 1 ? f32 : wtype;
    std::string bytes;
    if (type->name == std::string("Q8_0")) {
      auto q = QuantizeQ8_0(v);
      if (!q.ok()) return q.status();
      bytes = *std::move(q);
    } else if (type->name == std::string("Q4_K")) {
      auto q = QuantizeQ4_K(v);
      if (!q.ok()) return q.status();
      bytes = *std::move(q);
    } else {
      bytes = Encode(v, type->name);
    }
    absl::Status s = w.AddTensor(m->gguf_name, GgufDimsFromHfShape(t.shape), type->id, bytes);
    if (!s.ok()) return s;
  }
  return w.WriteFile(path);
}

}  // namespace modelfs::testing
