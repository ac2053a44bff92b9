#include "testsupport/hub/hub_test_model.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/formats/safetensors.h"
#include "testsupport/synth/synthetic_models.h"

namespace modelfs::testing {

std::string TinySafetensors(uint64_t seed) {
  SafetensorsWriter w;
  std::vector<float> a = SyntheticWeights(seed, 1, 16 * 32, 0.02f);
  std::string bf16;
  for (float v : a) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    bf16.push_back(static_cast<char>((bits >> 16) & 0xff));
    bf16.push_back(static_cast<char>((bits >> 24) & 0xff));
  }
  std::vector<float> b = SyntheticWeights(seed, 2, 32, 1.0f);
  std::string f32(reinterpret_cast<const char*>(b.data()), b.size() * 4);
  (void)w.AddTensor("model.layers.0.mlp.up_proj.weight", "BF16", {16, 32}, bf16);
  (void)w.AddTensor("model.norm.weight", "F32", {32}, f32);
  w.SetMetadata("format", "pt");
  return w.Serialize();
}

std::string TinyGguf(uint64_t seed) {
  TinyLlamaSpec spec;
  spec.layers = 1;
  spec.embedding = 32;
  spec.heads = 2;
  spec.kv_heads = 1;
  spec.ffn = 64;
  spec.vocab = 64;
  spec.context = 256;
  spec.seed = seed;
  absl::StatusOr<GgufWriter> w = MakeTinyLlamaWriter(spec);
  if (!w.ok()) return "";
  absl::StatusOr<std::string> bytes = w->Serialize();
  return bytes.ok() ? *bytes : "";
}

std::string TinyConfigJson(bool auto_map) {
  std::string s =
      "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
      "  \"hidden_size\": 32,\n  \"num_hidden_layers\": 1,\n  \"num_attention_heads\": 2,\n"
      "  \"num_key_value_heads\": 1,\n  \"intermediate_size\": 16,\n  \"vocab_size\": 64,\n"
      "  \"torch_dtype\": \"bfloat16\"";
  if (auto_map) {
    s += ",\n  \"auto_map\": {\"AutoConfig\": \"configuration_x.XConfig\", "
         "\"AutoModelForCausalLM\": \"modeling_x.XModel\"}";
  }
  return s + "\n}\n";
}

std::string TinyTokenizerJson() {
  return "{\"version\": \"1.0\", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, "
         "\"merges\": []}}\n";
}

std::string TinyModelCard(const std::string& license, const std::string& base_model,
                          const std::string& relation) {
  std::string s = "---\n";
  if (!license.empty()) absl::StrAppend(&s, "license: ", license, "\n");
  if (!base_model.empty()) absl::StrAppend(&s, "base_model: ", base_model, "\n");
  if (!relation.empty()) absl::StrAppend(&s, "base_model_relation: ", relation, "\n");
  absl::StrAppend(&s, "tags:\n- text-generation\n---\n\n# Tiny model\n\nFor tests.\n");
  return s;
}

std::map<std::string, std::string> TinyRepoFiles(uint64_t seed) {
  return {{"config.json", TinyConfigJson()},
          {"generation_config.json", "{\"do_sample\": false}\n"},
          {"tokenizer.json", TinyTokenizerJson()},
          {"tokenizer_config.json", "{\"model_max_length\": 256}\n"},
          {"model.safetensors", TinySafetensors(seed)},
          {"README.md", TinyModelCard("apache-2.0", "org/base-model", "finetune")}};
}

}  // namespace modelfs::testing
