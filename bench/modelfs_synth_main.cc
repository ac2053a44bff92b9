// modelfs-synth: writes synthetic models with the project's own writers (no downloads).
//   modelfs-synth safetensors DIR [--mib N] [--shard-mib N]
//   modelfs-synth smollm2-gguf FILE [--sparse]
//   modelfs-synth tiny-gguf FILE
//   modelfs-synth llama-gguf FILE [--type f16|q8_0|q4_k] [--layers N | --mib N] [--embedding N]
//                 [--ffn N] [--heads N] [--kv-heads N] [--vocab N]
//   modelfs-synth equivalent FILE [--mib N] [--dtype BF16|F16] [--gguf-type Q8_0|F16|Q4_K]
//                 [--seed N]   (.safetensors or .gguf by FILE's name: a model and its
//                 conversions that attest equivalent, equivalent_models.h)
#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>

#include "testsupport/synth/equivalent_models.h"
#include "testsupport/synth/synth_model.h"
#include "testsupport/synth/synthetic_models.h"

int main(int argc, char** argv) {
  CLI::App app{"modelfs-synth: generate synthetic models for tests, demos and benchmarks"};
  app.require_subcommand(1);
  std::string out;
  modelfs::SynthModelSpec spec;
  bool sparse = false;
  auto* st = app.add_subcommand("safetensors", "Llama-shaped BF16 safetensors directory");
  st->add_option("DIR", out)->required();
  st->add_option("--mib", spec.target_mib, "Approximate weight size in MiB")->default_val(256);
  st->add_option("--shard-mib", spec.max_shard_mib, "Shard size in MiB")->default_val(2048);
  auto* smol = app.add_subcommand("smollm2-gguf", "SmolLM2-135M-shaped Q8_0 GGUF (about 145 MB)");
  smol->add_option("FILE", out)->required();
  smol->add_flag("--sparse", sparse, "Leave tensor data as holes (header-only tests)");
  auto* tiny = app.add_subcommand("tiny-gguf", "A small llama GGUF with real bytes (about 4 MB)");
  tiny->add_option("FILE", out)->required();
  auto* llama = app.add_subcommand(
      "llama-gguf", "A llama GGUF that llama.cpp loads and runs (about 4 MB at Q8_0)");
  modelfs::LlamaCppSpec lspec;
  std::string type_name = "q8_0";
  uint64_t llama_mib = 0;
  llama->add_option("FILE", out)->required();
  llama->add_option("--type", type_name, "Matrix type: f16, q8_0 or q4_k")
      ->check(CLI::IsMember({"f16", "q8_0", "q4_k"}, CLI::ignore_case))
      ->default_val("q8_0");
  auto* layers_opt = llama->add_option("--layers", lspec.layers, "Layers")->default_val(4);
  llama->add_option("--mib", llama_mib, "Pick the layer count for about this many MiB")
      ->excludes(layers_opt);
  llama->add_option("--embedding", lspec.embedding, "Embedding length")->default_val(256);
  llama->add_option("--ffn", lspec.ffn, "Feed-forward length")->default_val(768);
  llama->add_option("--heads", lspec.heads, "Attention heads")->default_val(8);
  llama->add_option("--kv-heads", lspec.kv_heads, "Key/value heads")->default_val(4);
  llama->add_option("--vocab", lspec.vocab, "Vocabulary size (at least 259)")->default_val(512);
  auto* eq = app.add_subcommand(
      "equivalent",
      "A llama checkpoint (FILE.safetensors) or its llama.cpp-style GGUF (FILE.gguf) from a "
      "seed: the same seed gives conversions of one model (modelfs attest equivalence)");
  modelfs::testing::TinyLlamaOptions eo;
  uint64_t eq_mib = 0;
  eq->add_option("FILE", out)->required();
  eq->add_option("--mib", eq_mib, "About this many MiB of bf16 weights (0: the tiny model)");
  eq->add_option("--dtype", eo.dtype, "safetensors dtype: BF16, F16 or F32")->default_val("BF16");
  eq->add_option("--gguf-type", eo.gguf_type, "GGUF matrix type: Q8_0, F16, Q4_K")
      ->default_val("Q8_0");
  eq->add_option("--seed", eo.seed, "Seed (another seed: another model)")->default_val(1);
  CLI11_PARSE(app, argc, argv);

  absl::Status status;
  if (eq->parsed()) {
    if (eq_mib > 0) {
      eo.hidden = 2048;
      eo.heads = 16;
      eo.kv_heads = 8;
      eo.ffn = 5632;
      eo.vocab = 32000;
      eo.layers = modelfs::testing::LayersForMib(eo, eq_mib);
    }
    const bool gguf = out.size() > 5 && out.substr(out.size() - 5) == ".gguf";
    status = gguf ? modelfs::testing::WriteEquivalenceGguf(out, eo)
                  : modelfs::testing::WriteEquivalenceSafetensors(out, eo);
    if (status.ok()) printf("%s: %u layers\n", out.c_str(), eo.layers);
  } else if (st->parsed()) {
    auto r = modelfs::WriteSynthSafetensorsModel(out, spec);
    if (r.ok()) {
      printf("%s: %llu layers, %llu parameters, %llu weight bytes in %zu files\n", out.c_str(),
             static_cast<unsigned long long>(r->layers),
             static_cast<unsigned long long>(r->parameters),
             static_cast<unsigned long long>(r->weight_bytes), r->files.size());
    }
    status = r.status();
  } else if (smol->parsed()) {
    status = modelfs::WriteSmolLm2Q8Gguf(out, sparse);
  } else if (llama->parsed()) {
    const std::map<std::string, uint32_t> types = {{"f16", 1}, {"q8_0", 8}, {"q4_k", 12}};
    std::string lower = type_name;
    for (char& c : lower) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
    lspec.weight_type = types.at(lower);
    if (llama_mib > 0) {
      auto layers = modelfs::LlamaCppLayersForSize(lspec, llama_mib << 20);
      status = layers.status();
      if (layers.ok()) lspec.layers = *layers;
    }
    if (status.ok()) status = modelfs::WriteLlamaCppGguf(out, lspec);
  } else {
    status = modelfs::WriteTinyLlamaGguf(out);
  }
  if (!status.ok()) {
    fprintf(stderr, "modelfs-synth: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
