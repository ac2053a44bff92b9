// modelfs-synth: writes synthetic models with the project's own writers (no downloads).
//   modelfs-synth safetensors DIR [--mib N] [--shard-mib N]
//   modelfs-synth smollm2-gguf FILE [--sparse]
//   modelfs-synth tiny-gguf FILE
#include <CLI/CLI.hpp>

#include <cstdio>

#include "bench/synth_model.h"
#include "core/formats/synthetic_models.h"

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
  CLI11_PARSE(app, argc, argv);

  absl::Status status;
  if (st->parsed()) {
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
  } else {
    status = modelfs::WriteTinyLlamaGguf(out);
  }
  if (!status.ok()) {
    fprintf(stderr, "modelfs-synth: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
