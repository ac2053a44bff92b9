// The tiny llama of equivalent_models.h: one value generator, two writers.
#include "testsupport/synth/equivalent_models.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>
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

std::vector<Spec> Tensors(const TinyLlamaOptions& o) {
  const uint64_t h = o.hidden, kv = uint64_t{o.hidden} / o.heads * o.kv_heads;
  std::vector<Spec> out = {{"model.embed_tokens.weight", {o.vocab, h}}};
  for (uint32_t b = 0; b < o.layers; ++b) {
    const std::string p = absl::StrCat("model.layers.", b, ".");
    out.push_back({p + "input_layernorm.weight", {h}});
    out.push_back({p + "self_attn.q_proj.weight", {h, h}});
    out.push_back({p + "self_attn.k_proj.weight", {kv, h}});
    out.push_back({p + "self_attn.v_proj.weight", {kv, h}});
    out.push_back({p + "self_attn.o_proj.weight", {h, h}});
    out.push_back({p + "post_attention_layernorm.weight", {h}});
    if (o.arch == "mixtral") {
      out.push_back({p + "block_sparse_moe.gate.weight", {o.n_expert, h}});
      for (uint32_t e = 0; e < o.n_expert; ++e) {
        const std::string x = absl::StrCat(p, "block_sparse_moe.experts.", e, ".");
        out.push_back({x + "w1.weight", {o.ffn, h}});
        out.push_back({x + "w2.weight", {h, o.ffn}});
        out.push_back({x + "w3.weight", {o.ffn, h}});
      }
      continue;
    }
    out.push_back({p + "mlp.gate_proj.weight", {o.ffn, h}});
    out.push_back({p + "mlp.up_proj.weight", {o.ffn, h}});
    out.push_back({p + "mlp.down_proj.weight", {h, o.ffn}});
  }
  out.push_back({"model.norm.weight", {h}});
  out.push_back({"lm_head.weight", {o.vocab, h}});
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

uint32_t LayersForMib(const TinyLlamaOptions& o, uint64_t mib) {
  const uint64_t h = o.hidden, kv = uint64_t{o.hidden} / o.heads * o.kv_heads;
  const uint64_t per_layer = 2 * (2 * h * h + 2 * kv * h + 3 * h * o.ffn + 2 * h);
  const uint64_t fixed = 2 * (2 * uint64_t{o.vocab} * h + h);
  const uint64_t want = mib << 20;
  return want <= fixed ? 1
                       : static_cast<uint32_t>(std::max<uint64_t>(1, (want - fixed) / per_layer));
}

absl::Status WriteEquivalenceSafetensors(const std::string& path, const TinyLlamaOptions& o) {
  SafetensorsWriter w;
  for (const Spec& t : Tensors(o)) {
    if (t.name == o.drop_tensor) continue;
    absl::Status s = w.AddTensor(t.name, o.dtype, t.shape, Encode(Values(t, o), o.dtype));
    if (!s.ok()) return s;
  }
  return w.WriteFile(path);
}

absl::Status WriteEquivalenceGguf(const std::string& path, const TinyLlamaOptions& o) {
  const bool mixtral = o.arch == "mixtral";
  // llama.cpp writes Mixtral as a "llama" with experts.
  const std::string arch = mixtral ? "llama" : o.arch;
  auto map = TensorNameMap::ForArchitecture(arch, {o.heads, o.kv_heads, mixtral ? o.n_expert : 0});
  if (!map.ok()) return map.status();
  GgufWriter w;
  w.SetString("general.architecture", arch);
  w.SetString("general.name", "tiny-" + o.arch);
  w.SetUint32(arch + ".block_count", o.layers);
  w.SetUint32(arch + ".embedding_length", o.hidden);
  w.SetUint32(arch + ".feed_forward_length", o.ffn);
  w.SetUint32(arch + ".attention.head_count", o.heads);
  w.SetUint32(arch + ".attention.head_count_kv", o.kv_heads);
  if (mixtral) w.SetUint32(arch + ".expert_count", o.n_expert);
  const GgmlType* f32 = FindGgmlTypeByName("F32");
  const GgmlType* wtype = FindGgmlTypeByName(o.gguf_type);
  if (wtype == nullptr) return absl::InvalidArgumentError(o.gguf_type);
  const std::vector<Spec> specs = Tensors(o);
  std::map<std::string, const Spec*> by_name;
  for (const Spec& t : specs) by_name[t.name] = &t;
  std::set<std::string> written;
  for (const Spec& first : specs) {
    if (first.name == o.drop_tensor) continue;
    auto m = map->FromHf(first.name);
    if (!m) return absl::InternalError(absl::StrCat("no GGUF name for ", first.name));
    if (!written.insert(m->gguf_name).second) continue;  // a stack, written at its first expert
    std::vector<float> v;
    for (const std::string& part : m->hf_names) {
      const Spec& t = *by_name.at(part);
      std::vector<float> pv = Values(t, o);
      const bool skip = (m->transform == TensorTransform::kPermuteRows && !o.permute_qk) ||
                        (m->transform == TensorTransform::kAddOne && !o.gemma_add_one);
      if (!skip) {
        absl::Status s = HfToGgufValues(*m, t.shape, pv);
        if (!s.ok()) return s;
      }
      v.insert(v.end(), pv.begin(), pv.end());
    }
    std::vector<uint64_t> dims = GgufDimsFromHfShape(first.shape);
    if (m->transform == TensorTransform::kStackExperts) dims.push_back(m->hf_names.size());
    const GgmlType* type = first.shape.size() == 1 ? f32 : wtype;
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
    absl::Status s = w.AddTensor(m->gguf_name, dims, type->id, bytes);
    if (!s.ok()) return s;
  }
  return w.WriteFile(path);
}

}  // namespace modelfs::testing
