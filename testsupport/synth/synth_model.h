// Synthetic Hugging Face-style model directories for benchmarks, integration tests and the
// README demo: Llama-shaped BF16 safetensors (sharded with an index past a size), config.json,
// a small tokenizer.json and a README, sized to a target in MiB. Bytes come from a fixed-seed
// generator, so the same spec always writes the same files (and the same digests).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace modelfs {

struct SynthModelSpec {
  uint64_t target_mib = 256;      // approximate total weight bytes
  uint64_t max_shard_mib = 2048;  // shard past this size, with model.safetensors.index.json
  uint32_t hidden = 1024;
  uint32_t heads = 16;
  uint32_t kv_heads = 4;
  uint32_t ffn = 2816;
  uint32_t vocab = 32000;
  uint64_t seed = 7;
};

struct SynthModelResult {
  std::vector<std::string> files;  // paths written, relative to the directory
  uint64_t layers = 0;
  uint64_t parameters = 0;
  uint64_t weight_bytes = 0;
};

// Writes the model into dir (created if missing). Errors: kInvalidArgument for a bad spec,
// kInternal for I/O.
absl::StatusOr<SynthModelResult> WriteSynthSafetensorsModel(const std::string& dir,
                                                            const SynthModelSpec& spec);

}  // namespace modelfs
