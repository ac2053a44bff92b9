#include "integration/llama/llama_test_env.h"

#include <stdlib.h>

#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "integration/mount/mount_test_env.h"
#include "testsupport/synth/synthetic_models.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;

std::string SourceDir() {
  const char* s = getenv("MODELFS_SOURCE_DIR");
  return s != nullptr ? s : "";
}

}  // namespace

const std::vector<std::pair<std::string, uint32_t>>& LlamaModels() {
  static const auto* models = new std::vector<std::pair<std::string, uint32_t>>{
      {"llama-f16.gguf", 1}, {"llama-q8_0.gguf", 8}, {"llama-q4_k.gguf", 12}};
  return *models;
}

std::string LlamaUnavailable() {
  if (SourceDir().empty()) return "MODELFS_SOURCE_DIR is not set";
  auto r = RunCommand({"node", "--version"}, absl::Seconds(30));
  if (!r.ok() || r->exit_code != 0) return "no `node` on PATH (Node.js >= 20)";
  int major = 0;
  std::string v(absl::StripPrefix(absl::StripAsciiWhitespace(r->out), "v"));
  if (!absl::SimpleAtoi(v.substr(0, v.find('.')), &major) || major < 20) {
    return absl::StrCat("node ", r->out, " is older than 20, which node-llama-cpp 3.21.1 needs");
  }
  const std::string modules = SourceDir() + "/testsupport/llama/node_modules";
  for (const char* pkg :
       {"node-llama-cpp/package.json", "@node-llama-cpp/linux-x64/package.json"}) {
    if (!fs::exists(fs::path(modules) / pkg)) {
      return absl::StrCat(modules, "/", pkg,
                          " is missing: run scripts/install-deps.sh (npm ci in testsupport/llama)");
    }
  }
  return "";
}

absl::StatusOr<nlohmann::json> EvalWithLlama(const std::string& path, bool use_mmap) {
  std::vector<std::string> argv = {"node", SourceDir() + "/testsupport/llama/eval.mjs", path,
                                   "--threads", "2"};
  if (!use_mmap) argv.push_back("--no-mmap");
  auto r = RunCommand(argv, absl::Seconds(180));
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return absl::InternalError(
        absl::StrCat("llama.cpp on ", path, " exited ", r->exit_code, ": ", r->err));
  }
  nlohmann::json j = nlohmann::json::parse(r->out, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InternalError(absl::StrCat("llama.cpp on ", path, " printed no JSON: ", r->out));
  }
  return j;
}

absl::StatusOr<std::unique_ptr<LlamaSuite>> StartLlamaSuite() {
  auto s = std::make_unique<LlamaSuite>();
  s->work = std::make_unique<TempDir>();
  s->model_dir = s->work->Join("model").string();
  fs::create_directories(s->model_dir);
  for (const auto& [file, type] : LlamaModels()) {
    LlamaCppSpec spec;
    spec.weight_type = type;
    if (absl::Status st = WriteLlamaCppGguf(s->model_dir + "/" + file, spec); !st.ok()) {
      return absl::InternalError(absl::StrCat("writing ", file, ": ", st.message()));
    }
  }
  auto reg = RegistryFixture::Start(RegistryFixtureOptions{});
  if (!reg.ok()) {
    return absl::InternalError(
        absl::StrCat("the registry did not start: ", reg.status().message()));
  }
  s->registry = std::move(*reg);
  s->repository = "models/llama";
  s->model_ref = absl::StrCat(s->registry->host_port(), "/", s->repository, ":v1");
  s->volume_ref = s->model_ref + "-volume";
  auto push = RunCommand({ModelfsBinary(), "push", "--plain-http", s->model_ref, s->model_dir},
                         absl::Seconds(180));
  if (!push.ok() || push->exit_code != 0) {
    return absl::InternalError(
        absl::StrCat("modelfs push ", s->model_ref,
                     " failed: ", push.ok() ? push->err : std::string(push.status().message())));
  }
  for (const auto& [file, type] : LlamaModels()) {
    for (bool use_mmap : {true, false}) {
      auto j = EvalWithLlama(s->model_dir + "/" + file, use_mmap);
      if (!j.ok()) {
        return absl::InternalError(absl::StrCat("the local load: ", j.status().message()));
      }
      (use_mmap ? s->local_mmap : s->local_read)[file] = *j;
    }
  }
  return s;
}

void ExpectEveryModelEvaluatesAsFromLocalDisk(const LlamaSuite& suite, const std::string& dir,
                                              bool use_mmap) {
  for (const auto& [file, type] : LlamaModels()) {
    ASSERT_OK_AND_ASSIGN(nlohmann::json got, EvalWithLlama(dir + "/" + file, use_mmap));
    const nlohmann::json& want = (use_mmap ? suite.local_mmap : suite.local_read).at(file);
    ASSERT_EQ(got["tokens"].size(), 4u) << file;
    EXPECT_EQ(got["tokens"], want["tokens"]) << file;
    EXPECT_EQ(got["steps"], want["steps"])
        << file << "\nthrough " << dir << ": " << got["steps"].dump()
        << "\nlocal: " << want["steps"].dump();
  }
}

}  // namespace modelfs::testing
