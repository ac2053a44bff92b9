#include "testsupport/harness/publish_test_env.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/oci/digest.h"
#include "core/resolve/model_ref.h"
#include "core/status/status_macros.h"
#include "testsupport/synth/synth_model.h"
#include "testsupport/synth/synthetic_models.h"

#ifndef MODELFS_BIN
#error "MODELFS_BIN must name the modelfs binary"
#endif

namespace modelfs::testing {

namespace fs = std::filesystem;

std::string ModelfsBinary() {
  const char* env = getenv("MODELFS_BIN");
  return env != nullptr && *env != '\0' ? env : MODELFS_BIN;
}

absl::StatusOr<ProcessResult> RunModelfs(const std::vector<std::string>& args,
                                         std::map<std::string, std::string> env) {
  env.emplace("DOCKER_CONFIG", "/nonexistent/modelfs-e2e-no-docker-config");
  std::vector<std::string> argv = {ModelfsBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProcess(argv, env, absl::Seconds(120));
}

absl::StatusOr<std::vector<std::string>> WriteTestModel(const std::string& dir, uint64_t seed) {
  SynthModelSpec spec;
  spec.target_mib = 8;
  spec.max_shard_mib = 4;  // two shards and an index, as Hugging Face lays out larger models
  spec.hidden = 256;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.ffn = 704;
  spec.vocab = 4096;
  spec.seed = seed;
  ASSIGN_OR_RETURN(SynthModelResult r, WriteSynthSafetensorsModel(dir, spec));
  TinyLlamaSpec tiny;
  tiny.layers = 2;
  tiny.vocab = 1024;
  tiny.seed = seed;
  RETURN_IF_ERROR(WriteTinyLlamaGguf(dir + "/tiny.gguf", tiny));
  std::vector<std::string> files = r.files;
  files.push_back("tiny.gguf");
  std::sort(files.begin(), files.end());
  return files;
}

std::map<std::string, std::string> DescribeTree(const std::string& dir) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return out;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    // lexically: fs::relative would resolve a symlink to its target.
    std::string rel = it->path().lexically_relative(dir).generic_string();
    if (it->is_symlink()) {
      out[rel] = "symlink:" + fs::read_symlink(it->path(), ec).string();
    } else if (it->is_directory()) {
      out[rel] = "dir";
    } else if (it->is_regular_file()) {
      absl::StatusOr<Digest> d = DigestFile(it->path().string());
      out[rel] = d.ok() ? d->str() : "unreadable";
    } else {
      out[rel] = "other";
    }
  }
  return out;
}

std::map<std::string, std::string> DescribeFiles(const std::string& dir) {
  std::map<std::string, std::string> out = DescribeTree(dir);
  for (auto it = out.begin(); it != out.end();) {
    it = it->second.rfind("sha256:", 0) == 0 ? std::next(it) : out.erase(it);
  }
  return out;
}

std::string ReadFileOrDie(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json ParseJsonOutput(const std::string& out) {
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  return j.is_discarded() ? nlohmann::json() : j;
}

absl::StatusOr<std::unique_ptr<RegistryClient>> ConnectPlainHttp(const std::string& host_port) {
  ASSIGN_OR_RETURN(ImageReference ref, ImageReference::Parse(host_port + "/probe/probe:latest"));
  RegistryAccessOptions o;
  o.hosts.plain_http = true;
  o.docker_config = "/nonexistent/modelfs-e2e-no-docker-config/config.json";
  return ConnectRegistry(ref, HostCapability::kPush, o);
}

absl::StatusOr<std::string> FetchBlob(RegistryClient& client, const std::string& repo,
                                      const std::string& digest) {
  ASSIGN_OR_RETURN(Digest d, Digest::Parse(digest));
  std::string bytes;
  Sha256 h;
  RETURN_IF_ERROR(client.GetBlob(repo, d, [&](std::string_view chunk) {
    bytes.append(chunk.data(), chunk.size());
    h.Update(chunk);
    return absl::OkStatus();
  }));
  Digest got = h.Finish();
  if (got != d) {
    return absl::DataLossError(absl::StrCat("blob ", digest, " hashes to ", got.str()));
  }
  return bytes;
}

absl::StatusOr<Digest> UploadBlob(RegistryClient& client, const std::string& repo,
                                  std::string bytes) {
  Digest d = Digest::Of(bytes);
  const uint64_t size = bytes.size();
  RETURN_IF_ERROR(client.PushBlob(
      repo, d, size, BlobReadAtString(std::make_shared<const std::string>(std::move(bytes)))));
  return d;
}

std::string DockerConfigJson(const std::string& registry, const std::string& user,
                             const std::string& password) {
  nlohmann::json j = {
      {"auths", {{registry, {{"auth", absl::Base64Escape(absl::StrCat(user, ":", password))}}}}}};
  return j.dump(2);
}

}  // namespace modelfs::testing
