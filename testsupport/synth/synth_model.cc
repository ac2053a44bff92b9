#include "testsupport/synth/synth_model.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/formats/safetensors.h"
#include "core/status/status_macros.h"
#include "nlohmann/json.hpp"

namespace modelfs {
namespace {

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> shape;
};

uint64_t Elements(const TensorSpec& t) {
  uint64_t n = 1;
  for (uint64_t d : t.shape) n *= d;
  return n;
}

// BF16 values of a roughly normal distribution (sum of uniforms), from splitmix64, so the bytes
// look like weights (sign, small exponents) rather than noise.
std::string Bf16Bytes(uint64_t seed, uint64_t offset_elems, uint64_t n) {
  std::string out(n * 2, '\0');
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + offset_elems;
  for (uint64_t i = 0; i < n; ++i) {
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    float u = (static_cast<float>(z & 0xFFFF) + static_cast<float>((z >> 16) & 0xFFFF) +
               static_cast<float>((z >> 32) & 0xFFFF) - 98302.5f) /
              65536.0f * 0.04f;
    uint32_t bits;
    memcpy(&bits, &u, 4);
    uint16_t b = static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
    out[2 * i] = static_cast<char>(b & 0xFF);
    out[2 * i + 1] = static_cast<char>(b >> 8);
  }
  return out;
}

absl::Status WriteText(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", p.string()));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SynthModelResult> WriteSynthSafetensorsModel(const std::string& dir,
                                                            const SynthModelSpec& spec) {
  if (spec.hidden == 0 || spec.heads == 0 || spec.kv_heads == 0 || spec.hidden % spec.heads) {
    return absl::InvalidArgumentError("synthetic model: hidden must be a multiple of heads");
  }
  const uint64_t h = spec.hidden, hd = h / spec.heads, kv = spec.kv_heads * hd;
  std::vector<TensorSpec> embed = {{"model.embed_tokens.weight", {spec.vocab, h}}};
  auto layer = [&](uint64_t i) {
    std::string p = absl::StrCat("model.layers.", i, ".");
    return std::vector<TensorSpec>{
        {p + "input_layernorm.weight", {h}},         {p + "self_attn.q_proj.weight", {h, h}},
        {p + "self_attn.k_proj.weight", {kv, h}},    {p + "self_attn.v_proj.weight", {kv, h}},
        {p + "self_attn.o_proj.weight", {h, h}},     {p + "post_attention_layernorm.weight", {h}},
        {p + "mlp.gate_proj.weight", {spec.ffn, h}}, {p + "mlp.up_proj.weight", {spec.ffn, h}},
        {p + "mlp.down_proj.weight", {h, spec.ffn}},
    };
  };
  uint64_t per_layer = 0;
  for (const auto& t : layer(0)) per_layer += Elements(t) * 2;
  uint64_t fixed = (Elements(embed[0]) + h) * 2;
  uint64_t target = spec.target_mib << 20;
  uint64_t layers =
      target > fixed ? std::max<uint64_t>(1, (target - fixed + per_layer / 2) / per_layer) : 1;

  std::vector<TensorSpec> all = embed;
  for (uint64_t i = 0; i < layers; ++i) {
    auto l = layer(i);
    all.insert(all.end(), l.begin(), l.end());
  }
  all.push_back({"model.norm.weight", {h}});

  // Assign tensors to shards in order.
  const uint64_t max_shard = spec.max_shard_mib << 20;
  std::vector<std::vector<TensorSpec>> shards(1);
  uint64_t in_shard = 0;
  for (const auto& t : all) {
    uint64_t bytes = Elements(t) * 2;
    if (in_shard > 0 && in_shard + bytes > max_shard) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(t);
    in_shard += bytes;
  }

  std::filesystem::path root(dir);
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir, ": ", ec.message()));

  SynthModelResult result;
  result.layers = layers;
  nlohmann::json weight_map = nlohmann::json::object();
  uint64_t seed_offset = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    std::string name = shards.size() == 1 ? std::string("model.safetensors")
                                          : absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1,
                                                            shards.size());
    SafetensorsWriter w;
    w.SetMetadata("format", "pt");
    for (const auto& t : shards[s]) {
      uint64_t base = seed_offset;
      seed_offset += Elements(t);
      uint64_t seed = spec.seed;
      RETURN_IF_ERROR(
          w.AddTensorFromCallback(t.name, "BF16", t.shape,
                                  [seed, base](const SafetensorsTensor&, uint64_t offset,
                                               uint64_t length) -> absl::StatusOr<std::string> {
                                    return Bf16Bytes(seed, base + offset / 2, length / 2);
                                  }));
      result.parameters += Elements(t);
      result.weight_bytes += Elements(t) * 2;
      weight_map[t.name] = name;
    }
    RETURN_IF_ERROR(w.WriteFile((root / name).string()));
    result.files.push_back(name);
  }
  if (shards.size() > 1) {
    nlohmann::json index = {{"metadata", {{"total_size", result.weight_bytes}}},
                            {"weight_map", weight_map}};
    RETURN_IF_ERROR(WriteText(root / "model.safetensors.index.json", index.dump(2)));
    result.files.push_back("model.safetensors.index.json");
  }
  nlohmann::json config = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", h},
      {"intermediate_size", spec.ffn},
      {"num_hidden_layers", layers},
      {"num_attention_heads", spec.heads},
      {"num_key_value_heads", spec.kv_heads},
      {"head_dim", hd},
      {"max_position_embeddings", 8192},
      {"vocab_size", spec.vocab},
      {"torch_dtype", "bfloat16"},
      {"tie_word_embeddings", true},
  };
  RETURN_IF_ERROR(WriteText(root / "config.json", config.dump(2)));
  result.files.push_back("config.json");
  nlohmann::json vocab = nlohmann::json::object();
  for (int i = 0; i < 256; ++i) vocab[absl::StrFormat("<0x%02X>", i)] = i;
  nlohmann::json tokenizer = {{"version", "1.0"}, {"model", {{"type", "BPE"}, {"vocab", vocab}}}};
  RETURN_IF_ERROR(WriteText(root / "tokenizer.json", tokenizer.dump()));
  result.files.push_back("tokenizer.json");
  RETURN_IF_ERROR(WriteText(root / "README.md",
                            absl::StrCat("# synthetic llama (", layers, " layers)\n\n",
                                         "Generated by modelfs-synth for tests and benchmarks; "
                                         "the weights are pseudo-random.\n")));
  result.files.push_back("README.md");
  return result;
}

}  // namespace modelfs
