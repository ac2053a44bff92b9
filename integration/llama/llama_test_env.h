// What the llama.cpp end-to-end tests share: whether llama.cpp can run here (Node.js >= 20 and
// node-llama-cpp installed by scripts/install-deps.sh), running testsupport/llama/eval.mjs on a
// GGUF, and a suite setup that writes the synthetic llama GGUFs (F16, Q8_0, Q4_K), pushes them
// with `modelfs push` to a real docker-registry, and records llama.cpp's output for the local
// files, with mmap and without, for the tests to compare against.
//
// Thread safety: use from the test's thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {

// The model directory pushed as M and V: one GGUF per weight type (ggml type id).
const std::vector<std::pair<std::string, uint32_t>>& LlamaModels();

// Empty when Node.js >= 20 and node-llama-cpp with its linux-x64 binaries are installed; else
// what is missing (for SKIP_OR_FAIL_IF_UNAVAILABLE).
std::string LlamaUnavailable();

// eval.mjs's JSON for the GGUF at `path` (4 greedy steps, 2 threads). Errors name the file and
// carry the script's stderr.
absl::StatusOr<nlohmann::json> EvalWithLlama(const std::string& path, bool use_mmap);

struct LlamaSuite {
  std::unique_ptr<TempDir> work;
  std::unique_ptr<RegistryFixture> registry;
  std::string repository;  // "models/llama"
  std::string model_dir;
  std::string model_ref;   // M
  std::string volume_ref;  // V
  // file -> eval.mjs output for the local file, with mmap and without.
  std::map<std::string, nlohmann::json> local_mmap, local_read;
};

// Writes, pushes and evaluates locally. Errors name the step that failed.
absl::StatusOr<std::unique_ptr<LlamaSuite>> StartLlamaSuite();

// Loads every model under `dir` with llama.cpp and expects the local file's tokens and
// probabilities (gtest assertions).
void ExpectEveryModelEvaluatesAsFromLocalDisk(const LlamaSuite& suite, const std::string& dir,
                                              bool use_mmap);

}  // namespace modelfs::testing
