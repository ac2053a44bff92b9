// Tiny model files for the Hub tests, written with the project's own writers: a safetensors
// file, a GGUF, config.json (optionally with auto_map), a tokenizer and a model card.
//
// Thread safety: pure functions.
#pragma once

#include <map>
#include <string>

namespace modelfs::testing {

// A valid safetensors file of two tensors (BF16 [16, 32] and F32 [32]), about 1.2 KiB; `seed`
// changes every weight byte.
std::string TinySafetensors(uint64_t seed = 1);
// A valid GGUF llama of one layer (Q8_0 / Q4_0 / F32 / F16 tensors), about 20 KiB.
std::string TinyGguf(uint64_t seed = 1);
// {"architectures": ["LlamaForCausalLM"], "model_type": "llama", ...}; with `auto_map` it
// also names configuration_x.XConfig / modeling_x.XModel.
std::string TinyConfigJson(bool auto_map = false);
std::string TinyTokenizerJson();
// README.md with the Hub's YAML front matter (license, base_model, base_model_relation).
std::string TinyModelCard(const std::string& license, const std::string& base_model,
                          const std::string& relation);

// The files of a small Hugging Face repository: config.json, generation_config.json,
// tokenizer.json, tokenizer_config.json, model.safetensors, README.md.
std::map<std::string, std::string> TinyRepoFiles(uint64_t seed = 1);

}  // namespace modelfs::testing
