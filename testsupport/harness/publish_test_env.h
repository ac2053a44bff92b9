// What the publish end-to-end tests share: running the modelfs binary under test, the test
// model they push (real safetensors shards, a real GGUF, config.json and README written by the
// project's own writers), and reading a directory tree back to compare it bit for bit.
//
// Thread safety: free functions without shared state.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/registry/registry_client.h"
#include "nlohmann/json.hpp"
#include "testsupport/harness/process_runner.h"

namespace modelfs::testing {

// The modelfs binary built with the tests (compile definition MODELFS_BIN).
std::string ModelfsBinary();

// Runs `modelfs args...`. DOCKER_CONFIG points at a directory that does not exist (so a
// developer's ~/.docker never leaks into a test) unless `env` sets it.
absl::StatusOr<ProcessResult> RunModelfs(const std::vector<std::string>& args,
                                         std::map<std::string, std::string> env = {});

// Writes the test model into `dir`: Llama-shaped BF16 safetensors of about 8 MiB in two shards
// with model.safetensors.index.json, config.json, tokenizer.json and README.md (bench/
// synth_model.h), plus tiny.gguf (a small Q4_0/Q8_0 llama). `seed` changes every weight byte.
// Returns the relative paths written, sorted.
absl::StatusOr<std::vector<std::string>> WriteTestModel(const std::string& dir, uint64_t seed = 7);

// Every entry under `dir` (hidden ones included) by relative path: "sha256:<hex>" for a
// regular file, "symlink:<target>", "dir" for a directory, "other" for anything else.
std::map<std::string, std::string> DescribeTree(const std::string& dir);

// Only the regular files of DescribeTree.
std::map<std::string, std::string> DescribeFiles(const std::string& dir);

std::string ReadFileOrDie(const std::string& path);

// Parses stdout of a `--json` command; a parse failure gives a JSON null.
nlohmann::json ParseJsonOutput(const std::string& out);

// A plain-HTTP client for a fixture's registry ("127.0.0.1:PORT"), anonymous, with push rights.
absl::StatusOr<std::unique_ptr<RegistryClient>> ConnectPlainHttp(const std::string& host_port);

// A whole blob, fetched and checked against its digest.
absl::StatusOr<std::string> FetchBlob(RegistryClient& client, const std::string& repo,
                                      const std::string& digest);

// Uploads `bytes` as a blob of repo (monolithic) and returns its digest.
absl::StatusOr<Digest> UploadBlob(RegistryClient& client, const std::string& repo,
                                  std::string bytes);

// A docker config.json with one `auths` entry for `registry` (base64 "user:pass").
std::string DockerConfigJson(const std::string& registry, const std::string& user,
                             const std::string& password);

}  // namespace modelfs::testing
