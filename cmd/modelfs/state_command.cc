// `modelfs state push` and `modelfs state list`: a model's states (prompt caches, primed
// sessions) as artifacts whose subject is the model (core/publish/state_push.h).
#include <cstdio>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "cmd/modelfs/cli.h"
#include "core/publish/state_push.h"
#include "core/resolve/model_ref.h"
#include "core/status/status_macros.h"
#include "core/text/escape.h"
#include "core/text/number_format.h"

namespace modelfs::cli {
namespace {

struct StateCli {
  bool plain_http = false;
  std::string hosts_dir = "/etc/containerd/certs.d";
  std::string docker_config;
  bool json = false;
  std::string model_ref;
  std::vector<std::string> files;
  std::string name;
  std::string format;
  std::optional<uint64_t> tokens;
  std::string precision;
  std::string tag;
};

void AddFlags(CLI::App* cmd, StateCli& c) {
  cmd->add_flag("--plain-http", c.plain_http,
                "Talk plain HTTP to this registry (only for hosts you trust, e.g. loopback)");
  cmd->add_option("--hosts-dir", c.hosts_dir,
                  "containerd-style certs.d directory with <host>/hosts.toml")
      ->default_str("/etc/containerd/certs.d");
  cmd->add_option(
      "--docker-config", c.docker_config,
      "docker config.json with registry credentials (default: $DOCKER_CONFIG or ~/.docker)");
  cmd->add_flag("--json", c.json, "Print JSON");
}

RegistryAccessOptions Access(const StateCli& c) {
  RegistryAccessOptions o;
  o.hosts.plain_http = c.plain_http;
  o.hosts.certs_dir = c.hosts_dir;
  o.docker_config = c.docker_config;
  return o;
}

// MODEL_REF (a model, or a volume image followed to its model), resolved and verified.
absl::StatusOr<ResolvedModel> ResolveModelRef(const StateCli& c, RegistryClients& clients) {
  ASSIGN_OR_RETURN(ImageReference ref, ImageReference::Parse(c.model_ref));
  ASSIGN_OR_RETURN(std::shared_ptr<RegistryClient> client, clients.For(ref.registry()));
  return ResolveModel(*client, ref, clients.Connector(), NotingLocation(ref));
}

absl::Status RunStatePush(const StateCli& c) {
  RegistryClients clients(Access(c));
  ASSIGN_OR_RETURN(ResolvedModel model, ResolveModelRef(c, clients));
  // S goes next to M, wherever MODEL_REF was: the referrers of M live in M's repository.
  ASSIGN_OR_RETURN(std::unique_ptr<RegistryClient> push,
                   ConnectRegistry(model.registry, HostCapability::kPush, Access(c)));
  StatePushOptions o;
  o.inputs = c.files;
  o.name = c.name;
  o.format = c.format;
  o.tokens = c.tokens;
  o.precision = c.precision;
  o.tag = c.tag;
  ASSIGN_OR_RETURN(StatePushResult r, PushState(*push, model, o));
  if (c.json) {
    printf("%s\n", StatePushResultToJson(r).dump(2).c_str());
    return absl::OkStatus();
  }
  uint64_t bytes = 0;
  for (const auto& b : r.blobs) bytes += b.descriptor.size;
  printf("state %s (%s%s) of model %s@%s: %d blob(s) uploaded, %d present, %s bytes\n",
         r.config.name.c_str(), EscapeUntrusted(r.config.format).c_str(),
         r.config.tokens ? absl::StrCat(", ", *r.config.tokens, " tokens").c_str() : "",
         r.repository.c_str(), r.model.digest.str().c_str(), r.uploaded, r.present,
         WithCommas(bytes).c_str());
  printf("state  %s:%s  %s\n", r.repository.c_str(), r.state_tag.c_str(),
         r.state.digest.str().c_str());
  printf("volume %s:%s  %s\n", r.repository.c_str(), r.volume_tag.c_str(),
         r.volume.digest.str().c_str());
  printf("referrers: %s\n",
         r.referrers == "api" ? "listed by the registry's referrers API" : "fallback tag updated");
  printf("mount with: modelfs mount %s@%s --state %s@%s DIR\n", r.repository.c_str(),
         r.model.digest.str().c_str(), r.repository.c_str(), r.state.digest.str().c_str());
  return absl::OkStatus();
}

absl::Status RunStateList(const StateCli& c) {
  RegistryClients clients(Access(c));
  ASSIGN_OR_RETURN(ResolvedModel model, ResolveModelRef(c, clients));
  ASSIGN_OR_RETURN(std::shared_ptr<RegistryClient> client, clients.For(model.registry));
  ASSIGN_OR_RETURN(std::vector<StateListing> states, ListStates(*client, model));
  const std::string repository = absl::StrCat(model.registry, "/", model.repository);
  if (c.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& s : states) list.push_back(StateListingToJson(s, repository));
    nlohmann::json j = {
        {"model",
         {{"digest", model.model_descriptor.digest.str()},
          {"reference", absl::StrCat(repository, "@", model.model_descriptor.digest.str())}}},
        {"states", list}};
    printf("%s\n", j.dump(2).c_str());
    return absl::OkStatus();
  }
  printf("%zu state(s) of %s@%s\n", states.size(), repository.c_str(),
         model.model_descriptor.digest.str().c_str());
  for (const auto& s : states) {
    nlohmann::json j = StateListingToJson(s, repository);
    printf("%-24s %-16s tokens %-8s precision %-6s %s bytes in %zu file(s)\n  state  %s\n",
           s.config.name.c_str(), EscapeUntrusted(s.config.format).c_str(),
           s.config.tokens ? std::to_string(*s.config.tokens).c_str() : "-",
           s.config.precision.empty() ? "-" : EscapeUntrusted(s.config.precision).c_str(),
           WithCommas(j["bytes"].get<uint64_t>()).c_str(), s.files.size(),
           j["reference"].get<std::string>().c_str());
    if (s.volume) printf("  volume %s\n", j["volume"].get<std::string>().c_str());
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterStateCommands(CLI::App& app, Context& ctx) {
  CLI::App* state = app.add_subcommand(
      "state",
      "A model's states (prompt caches, primed sessions) as artifacts whose subject is the model");
  state->require_subcommand(1);
  {
    auto c = std::make_shared<StateCli>();
    CLI::App* cmd = state->add_subcommand(
        "push",
        "Publish files as a state of a model (subject = the model), with a volume image for pods");
    cmd->add_option("MODEL_REF", c->model_ref,
                    "The model (a ModelPack artifact, or a volume image followed to its model)")
        ->required();
    cmd->add_option("FILE", c->files, "State files and directories")->required();
    cmd->add_option("--name", c->name, "What the state is, e.g. system-prompt (becomes a tag)")
        ->required();
    cmd->add_option("--format", c->format, "What reads it: llama.cpp, vllm, shem.session/v1, ...")
        ->required();
    cmd->add_option("--tokens", c->tokens, "Tokens the state has read");
    cmd->add_option("--precision", c->precision, "Precision of the state's tensors (f16, ...)");
    cmd->add_option("--tag", c->tag, "Tag for the state (default state-<name>)");
    AddFlags(cmd, *c);
    cmd->callback([c, &ctx] { ctx.status = RunStatePush(*c); });
  }
  {
    auto c = std::make_shared<StateCli>();
    CLI::App* cmd = state->add_subcommand(
        "list", "List a model's states (referrers API, else the fallback tag), each verified");
    cmd->add_option("MODEL_REF", c->model_ref,
                    "The model (a ModelPack artifact, or a volume image followed to its model)")
        ->required();
    AddFlags(cmd, *c);
    cmd->callback([c, &ctx] { ctx.status = RunStateList(*c); });
  }
}

}  // namespace modelfs::cli
