// `modelfs inspect FILE|URL|DIR|INDEX.json [--json] [--tensors] [--peek NAME]`: what a model is,
// from its headers only.
#include <cstdio>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cmd/modelfs/cli.h"
#include "cmd/modelfs/inspect_render.h"
#include "cmd/modelfs/pickle_render.h"
#include "core/formats/model_inspect.h"
#include "core/status/status_macros.h"
#include "core/text/escape.h"

namespace modelfs::cli {
namespace {

struct InspectCliOptions {
  std::vector<std::string> paths;
  bool json = false;
  bool tensors = false;
  std::string peek;
  size_t peek_count = 8;
  bool insecure = false;
  bool plain_http = false;
  std::string hosts_dir = "/etc/containerd/certs.d";
  std::string docker_config;
};

absl::Status RunInspect(const InspectCliOptions& o) {
  InspectOptions io;
  io.http.verify_tls = !o.insecure;
  // A registry reference: the artifact's config and identity record, no layer downloaded.
  if (o.paths.size() == 1 && LooksLikeRegistryReference(o.paths[0])) {
    RegistryAccessOptions access;
    access.hosts.plain_http = o.plain_http;
    access.hosts.certs_dir = o.hosts_dir;
    access.docker_config = o.docker_config;
    if (o.tensors) return InspectReferenceTensors(o.paths[0], access, o.json);
    ASSIGN_OR_RETURN(RefInspection r, InspectReference(o.paths[0], access));
    if (o.json) {
      printf("%s\n", RefInspectionToJson(r)
                         .dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
                         .c_str());
    } else {
      printf("%s", RenderRefInspection(r).c_str());
    }
    return absl::OkStatus();
  }
  // Pickle checkpoints are scanned, never loaded; the verdict decides the exit code.
  ASSIGN_OR_RETURN(PickleInspection pickles, InspectPickles(o.paths, o.insecure));
  if (pickles.other_paths.empty()) {
    if (o.json) {
      nlohmann::json scans = nlohmann::json::array();
      for (const PickleScan& s : pickles.scans) scans.push_back(PickleScanToJson(s));
      printf("%s\n", nlohmann::json({{"pickles", scans}}).dump(2).c_str());
    } else {
      for (size_t i = 0; i < pickles.scans.size(); ++i) {
        printf("%s%s", i ? "\n" : "", RenderPickleScan(pickles.scans[i]).c_str());
      }
    }
    return PickleVerdict(pickles);
  }
  for (const PickleScan& s : pickles.scans) {
    if (!o.json) printf("%s\n", RenderPickleScan(s).c_str());
  }
  ASSIGN_OR_RETURN(InspectedModel model, InspectModel(pickles.other_paths, io));
  nlohmann::json j;
  if (o.json) {
    j = InspectedModelToJson(model, o.tensors);
    if (!pickles.scans.empty()) {
      j["pickles"] = nlohmann::json::array();
      for (const PickleScan& s : pickles.scans) j["pickles"].push_back(PickleScanToJson(s));
    }
  }
  std::string peek_line;  // text mode: printed after the summary
  if (!o.peek.empty()) {
    auto holds = [&](const InspectedFile& f) {
      for (const auto& t : f.tensors) {
        if (t.name == o.peek) return true;
      }
      return false;
    };
    const InspectedFile* owner = nullptr;
    for (const auto& f : model.files) {
      if (holds(f)) owner = &f;
    }
    // A sharded checkpoint lists no tensors of its own: read the shards' headers to find it.
    std::optional<InspectedFile> shard;
    for (const auto& f : model.files) {
      if (owner != nullptr || !f.sharded) continue;
      for (const auto& s : f.sharded->shards) {
        ASSIGN_OR_RETURN(InspectedFile sf, InspectLocation(s.location, io));
        if (holds(sf)) {
          shard = std::move(sf);
          owner = &*shard;
          break;
        }
      }
    }
    if (owner == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("no tensor named '", o.peek, "' in ",
                       model.files.empty() ? "the input" : model.files[0].location));
    }
    ASSIGN_OR_RETURN(auto reader, OpenRangeReader(owner->location, io.http));
    ASSIGN_OR_RETURN(std::vector<float> values, PeekTensor(*reader, *owner, o.peek, o.peek_count));
    if (o.json) {
      j["peek"] = {{"tensor", o.peek}, {"values", values}};
    } else {
      peek_line = absl::StrCat("peek ", EscapeUntrusted(o.peek), ":");
      for (size_t i = 0; i < values.size(); ++i) {
        absl::StrAppend(&peek_line, i ? ", " : " ", absl::StrFormat("%g", values[i]));
      }
    }
  }
  if (o.json) {
    printf("%s\n", j.dump(2).c_str());
    return PickleVerdict(pickles);
  }
  for (size_t i = 0; i < model.files.size(); ++i) {
    if (i) printf("\n");
    printf("%s", RenderInspectedFile(model.files[i], o.tensors).c_str());
  }
  if (model.files.size() > 1) {
    printf("\nmodel total: %s parameters, %s tensor bytes in %zu files\n",
           WithCommas(model.parameters).c_str(), WithCommas(model.tensor_bytes).c_str(),
           model.files.size());
  }
  if (model.config && model.shape) {
    const ModelShape& s = *model.shape;
    printf("config.json: %s, %llu layers, %llu heads, %llu KV heads, head dim %llu\n",
           EscapeUntrusted(s.architecture).c_str(), static_cast<unsigned long long>(s.layers),
           static_cast<unsigned long long>(s.heads), static_cast<unsigned long long>(s.kv_heads),
           static_cast<unsigned long long>(s.head_dim_k));
  }
  for (const auto& w : model.warnings) printf("warning: %s\n", EscapeUntrusted(w).c_str());
  if (!peek_line.empty()) printf("%s\n", peek_line.c_str());
  return PickleVerdict(pickles);
}

}  // namespace

void RegisterInspect(CLI::App& app, Context& ctx) {
  auto o = std::make_shared<InspectCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "inspect",
      "Read safetensors / GGUF headers (file, http(s) URL, directory or "
      "model.safetensors.index.json): tensors, parameters, dtypes, quantization, shape. "
      "Pickle checkpoints (.bin .pt .pth .pkl .ckpt) are scanned, never loaded: the globals "
      "they import are listed and any outside the allow-list is flagged (exit 1)");
  cmd->add_option("PATH", o->paths,
                  "File, URL, directory, sharded index, or a registry reference (REF: its "
                  "config and identity record)")
      ->required();
  cmd->add_flag("--json", o->json, "Print JSON (byte counts as plain integers)");
  cmd->add_flag("--tensors", o->tensors,
                "List every tensor; for REF from its volume image's tensor index (name, dtype, "
                "shape, offset, length, BLAKE3 digest), else its files' headers and hashed bytes");
  cmd->add_option("--peek", o->peek, "Decode the first values of this tensor");
  cmd->add_option("--peek-count", o->peek_count, "How many values --peek prints")->default_val(8);
  cmd->add_flag("--insecure", o->insecure, "Do not verify TLS certificates for https URLs");
  cmd->add_flag("--plain-http", o->plain_http,
                "REF: talk plain HTTP to the registry (only for hosts you trust, e.g. loopback)");
  cmd->add_option("--hosts-dir", o->hosts_dir,
                  "REF: containerd-style certs.d directory with <host>/hosts.toml")
      ->default_str("/etc/containerd/certs.d");
  cmd->add_option("--docker-config", o->docker_config,
                  "REF: docker config.json with registry credentials");
  cmd->callback([o, &ctx] { ctx.status = RunInspect(*o); });
}

}  // namespace modelfs::cli
