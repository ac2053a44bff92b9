// modelfs node ls | prefetch | evict: the snapshotter daemon's models, through its admin socket
// (modelfs.admin.v1, snapshotter/admin). The socket's path comes from the daemon's config file
// (--config, default the packaged /etc/modelfs/snapshotter.toml), as the daemon reads it.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cmd/modelfs-snapshotter/daemon_config.h"
#include "cmd/modelfs/cli.h"
#include "cmd/modelfs/node_render.h"
#include "core/status/status_macros.h"
#include "core/text/escape.h"
#include "modelfs/admin/v1/admin.grpc.pb.h"

namespace modelfs::cli {
namespace {

namespace admin = modelfs::admin::v1;
using nlohmann::json;

struct NodeCli {
  std::string config;
  std::string ref;
  bool json = false;
};

void AddFlags(CLI::App* cmd, NodeCli& c) {
  cmd->add_option("--config", c.config,
                  absl::StrCat("The daemon's snapshotter.toml, which names its admin_socket "
                               "(default ",
                               snapshotter::kDefaultConfigPath, ", or the defaults without it)"));
  cmd->add_flag("--json", c.json, "Print JSON");
}

// The admin socket the daemon of `config` listens on. Errors: the config's (kInvalidArgument,
// kNotFound for a --config that does not exist).
absl::StatusOr<std::string> SocketPath(const NodeCli& c) {
  const std::string path = c.config.empty() ? snapshotter::kDefaultConfigPath : c.config;
  snapshotter::DaemonConfig config;
  absl::StatusOr<std::string> text = snapshotter::ReadDaemonConfigFile(path);
  if (text.ok()) {
    RETURN_IF_ERROR(snapshotter::ParseDaemonConfig(*text, path, config));
  } else if (!absl::IsNotFound(text.status()) || !c.config.empty()) {
    return text.status();
  }
  return snapshotter::AdminSocketPath(config);
}

absl::StatusOr<std::unique_ptr<admin::Admin::Stub>> Connect(const NodeCli& c, std::string* socket) {
  ASSIGN_OR_RETURN(*socket, SocketPath(c));
  return admin::Admin::NewStub(
      grpc::CreateChannel(absl::StrCat("unix:", *socket), grpc::InsecureChannelCredentials()));
}

// A gRPC status as the CLI's: the same code (gRPC's codes are absl's), with the socket named
// when the daemon could not be reached.
absl::Status FromGrpc(const grpc::Status& st, const std::string& socket) {
  if (st.ok()) return absl::OkStatus();
  const auto code = static_cast<absl::StatusCode>(st.error_code());
  if (code == absl::StatusCode::kUnavailable &&
      st.error_message().find("connect") != std::string::npos) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach modelfs-snapshotter on its admin socket ", socket, " (",
                     st.error_message(), "); is the daemon running, and are you root?"));
  }
  return absl::Status(code, st.error_message());
}

json ToJson(const admin::ListResponse& r) {
  json out;
  out["models"] = json::array();
  for (const admin::Model& m : r.models()) {
    json jm = {{"name", m.name()},
               {"model_digest", m.model_digest()},
               {"volume_digest", m.volume_digest()},
               {"reference", m.reference()},
               {"registry", m.registry()},
               {"repository", m.repository()},
               {"state", m.state()},
               {"error", m.error()},
               {"prefetched", m.prefetched()},
               {"layers", m.layers()},
               {"size", m.size()},
               {"cached_bytes", m.cached_bytes()},
               {"verified_bytes", m.verified_bytes()},
               {"sealed", m.sealed()},
               {"passthrough_opens", m.passthrough_opens()},
               {"snapshots", json::array()}};
    for (const admin::Snapshot& s : m.snapshots()) {
      jm["snapshots"].push_back({{"key", s.key()},
                                 {"kind", s.kind()},
                                 {"image", s.image()},
                                 {"container", s.container()}});
    }
    out["models"].push_back(std::move(jm));
  }
  out["cache"] = {{"bytes", r.cache_bytes()},
                  {"max_bytes", r.cache_max_bytes()},
                  {"layers", r.cache_layers()},
                  {"disk_full", r.disk_full()}};
  out["layers"] = json::array();
  for (const admin::Layer& l : r.layers()) {
    out["layers"].push_back(
        {{"digest", l.digest()},
         {"size", l.size()},
         {"quarantined", l.quarantined()},
         {"scrubbing", l.scrubbing()},
         {"models", json(std::vector<std::string>(l.models().begin(), l.models().end()))}});
  }
  out["errors"] = json::array();
  for (const admin::RegistryError& e : r.errors()) {
    out["errors"].push_back(
        {{"registry", e.registry()},
         {"at",
          e.at_unix_seconds() == 0
              ? std::string()
              : absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixSeconds(e.at_unix_seconds()),
                                 absl::UTCTimeZone())},
         {"message", e.message()},
         {"count", e.count()}});
  }
  return out;
}

json ToJson(const admin::PrefetchProgress& p) {
  return {{"phase", p.phase()},
          {"model_digest", p.model_digest()},
          {"layers", p.layers()},
          {"layers_sealed", p.layers_sealed()},
          {"total_bytes", p.total_bytes()},
          {"verified_bytes", p.verified_bytes()}};
}

absl::Status RunList(const NodeCli& c) {
  std::string socket;
  ASSIGN_OR_RETURN(auto stub, Connect(c, &socket));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  admin::ListResponse response;
  RETURN_IF_ERROR(FromGrpc(stub->List(&context, admin::ListRequest(), &response), socket));
  const json j = ToJson(response);
  if (c.json) {
    printf("%s\n", j.dump(2).c_str());
  } else {
    fputs(RenderNodeList(j).c_str(), stdout);
  }
  return absl::OkStatus();
}

absl::Status RunPrefetch(const NodeCli& c) {
  std::string socket;
  ASSIGN_OR_RETURN(auto stub, Connect(c, &socket));
  grpc::ClientContext context;
  admin::PrefetchRequest request;
  request.set_reference(c.ref);
  std::unique_ptr<grpc::ClientReader<admin::PrefetchProgress>> reader =
      stub->Prefetch(&context, request);
  admin::PrefetchProgress p;
  json last = json::object();
  std::string last_phase;
  const bool tty = StderrIsTty() && !c.json;
  while (reader->Read(&p)) {
    last = ToJson(p);
    if (tty) {
      fprintf(stderr, "\r\033[K%s", RenderPrefetchProgress(last).c_str());
    } else if (!c.json && p.phase() != last_phase) {
      fprintf(stderr, "%s\n", RenderPrefetchProgress(last).c_str());
    }
    last_phase = p.phase();
  }
  if (tty) fputc('\n', stderr);
  RETURN_IF_ERROR(FromGrpc(reader->Finish(), socket));
  if (c.json) {
    printf("%s\n", last.dump(2).c_str());
  } else {
    printf("%s: model %s cached and verified (%s)\n", EscapeUntrusted(c.ref).c_str(),
           p.model_digest().c_str(), RenderPrefetchProgress(last).c_str());
  }
  return absl::OkStatus();
}

absl::Status RunEvict(const NodeCli& c) {
  std::string socket;
  ASSIGN_OR_RETURN(auto stub, Connect(c, &socket));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(2));
  admin::EvictRequest request;
  request.set_reference(c.ref);
  admin::EvictResponse r;
  absl::Status st = FromGrpc(stub->Evict(&context, request, &r), socket);
  // A model that snapshots hold is not the node's to drop: bad input (exit 2), the snapshots
  // named.
  if (absl::IsFailedPrecondition(st)) return absl::InvalidArgumentError(st.message());
  RETURN_IF_ERROR(st);
  if (c.json) {
    json j = {{"model_digest", r.model_digest()},
              {"was_registered", r.was_registered()},
              {"layers_evicted", r.layers_evicted()},
              {"bytes_evicted", r.bytes_evicted()},
              {"layers_kept", r.layers_kept()}};
    printf("%s\n", j.dump(2).c_str());
  } else {
    printf("model %s evicted: %s layers, %s bytes%s\n", r.model_digest().c_str(),
           WithCommas(r.layers_evicted()).c_str(), WithCommas(r.bytes_evicted()).c_str(),
           r.layers_kept() == 0
               ? ""
               : absl::StrCat("; ", r.layers_kept(), " layer(s) kept (another model uses them)")
                     .c_str());
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterNodeCommands(CLI::App& app, Context& ctx) {
  CLI::App* node = app.add_subcommand(
      "node", "What the node's modelfs-snapshotter holds, through its root-only admin socket");
  node->require_subcommand(1);
  {
    auto c = std::make_shared<NodeCli>();
    CLI::App* cmd = node->add_subcommand(
        "ls",
        "List the daemon's models (V, M, registry, size, bytes cached and verified, sealed, "
        "passthrough opens), the snapshots and containers holding each, the cache against its "
        "bound, quarantined or scrubbing layers and the last error per registry");
    AddFlags(cmd, *c);
    cmd->callback([c, &ctx] { ctx.status = RunList(*c); });
  }
  {
    auto c = std::make_shared<NodeCli>();
    CLI::App* cmd = node->add_subcommand(
        "prefetch",
        "Have the daemon resolve REF as a pod's pull would (registry access, model_hosts, "
        "signature policy), register its model and fetch and verify every byte. Exit 0 when "
        "the whole model is cached and verified, 1 on a verification failure or refusal, 2 on "
        "bad input");
    cmd->add_option("REF", c->ref, "A volume image reference (tag or digest)")->required();
    AddFlags(cmd, *c);
    cmd->callback([c, &ctx] { ctx.status = RunPrefetch(*c); });
  }
  {
    auto c = std::make_shared<NodeCli>();
    CLI::App* cmd = node->add_subcommand(
        "evict",
        "Drop the cached bytes of the model REF names when no snapshot holds it (exit 2 naming "
        "the snapshots when one does)");
    cmd->add_option("REF", c->ref, "A volume image reference, or V's or M's digest")->required();
    AddFlags(cmd, *c);
    cmd->callback([c, &ctx] { ctx.status = RunEvict(*c); });
  }
}

}  // namespace modelfs::cli
