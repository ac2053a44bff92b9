// `modelfs sign REF` and `modelfs verify REF`, and the signing and policy hooks of push,
// convert, mount and pull (core/trust).
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "cmd/modelfs/cli.h"
#include "core/resolve/model_ref.h"
#include "core/status/status_macros.h"
#include "core/text/escape.h"
#include "core/trust/enforce.h"
#include "core/trust/evaluate.h"
#include "core/trust/policy.h"
#include "core/trust/sign.h"
#include "nlohmann/json.hpp"

namespace modelfs::cli {
namespace {

struct SignCli {
  std::string ref;
  std::string key;
  bool plain_http = false;
  std::string hosts_dir = "/etc/containerd/certs.d";
  std::string docker_config;
  bool json = false;
};

RegistryAccessOptions Access(bool plain_http, const std::string& hosts_dir,
                             const std::string& docker_config) {
  RegistryAccessOptions o;
  o.hosts.plain_http = plain_http;
  o.hosts.certs_dir = hosts_dir.empty() ? "/etc/containerd/certs.d" : hosts_dir;
  o.docker_config = docker_config;
  return o;
}

absl::Status RunSign(const SignCli& c) {
  ASSIGN_OR_RETURN(ImageReference ref, ImageReference::Parse(c.ref));
  ASSIGN_OR_RETURN(PrivateKey key, LoadSigningKey(c.key));
  ASSIGN_OR_RETURN(auto client,
                   ConnectRegistry(ref, HostCapability::kPush,
                                   Access(c.plain_http, c.hosts_dir, c.docker_config)));
  ASSIGN_OR_RETURN(Digest digest, ResolveManifestDigest(*client, ref));
  ASSIGN_OR_RETURN(nlohmann::json j, SignAndReport(*client, ref, digest, key, c.json));
  if (c.json) printf("%s\n", j.dump(2).c_str());
  return absl::OkStatus();
}

nlohmann::json VerdictJson(const VerifyRefCli& c, const ImageReference& ref, const Digest& digest,
                           const TrustVerdict& v) {
  nlohmann::json sigs = nlohmann::json::array();
  for (const SignatureCheck& s : v.signatures) {
    sigs.push_back({{"layer", s.layer_digest.str()},
                    {"outcome", std::string(ReasonName(s.outcome))},
                    {"key", s.key},
                    {"key_fingerprint", s.key_fingerprint},
                    {"docker_reference", s.docker_reference},
                    {"signed_digest", s.signed_digest.str()},
                    {"detail", s.detail}});
  }
  return {{"reference", ref.String()},
          {"digest", digest.str()},
          {"policy", c.policy.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.policy)},
          {"key", c.key.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.key)},
          {"scope", v.scope},
          {"requirement", v.requirement},
          {"signed_identity", std::string(IdentityMatchName(v.identity))},
          {"signature_tag", SignatureTag(digest)},
          {"signature_manifest", v.sig_manifest_digest.str()},
          {"signatures", sigs},
          {"accepted", v.accepted},
          {"reason", std::string(ReasonName(v.reason))},
          {"message", v.message}};
}

}  // namespace

absl::StatusOr<PrivateKey> LoadSigningKey(const std::string& path) {
  auto key = PrivateKey::FromFile(path);
  if (!key.ok() && key.status().code() != absl::StatusCode::kInvalidArgument &&
      key.status().code() != absl::StatusCode::kNotFound) {
    return absl::InvalidArgumentError(key.status().message());  // a wrong passphrase is bad input
  }
  return key;
}

absl::StatusOr<nlohmann::json> SignAndReport(RegistryClient& client, const ImageReference& image,
                                             const Digest& digest, const PrivateKey& key,
                                             bool json) {
  RegistrySignatureStore store(&client);
  ASSIGN_OR_RETURN(SignResult r, SignImage(store, image, digest, key));
  const std::string line = absl::StrCat(
      "signed ", image.Name(), "@", digest.str(), " as ", r.docker_reference, " with ",
      key.public_key().name(), "; ", image.Name(), ":", r.stored.tag, " holds ",
      r.stored.signatures, " signature(s)", r.stored.already_present ? " (already signed)" : "");
  fprintf(json ? stderr : stdout, "%s\n", EscapeUntrusted(line).c_str());
  return nlohmann::json{{"reference", image.String()},
                        {"digest", digest.str()},
                        {"docker_reference", r.docker_reference},
                        {"key", key.public_key().name()},
                        {"key_fingerprint", key.public_key().fingerprint()},
                        {"signature_tag", r.stored.tag},
                        {"signature_manifest", r.stored.sig_manifest_digest.str()},
                        {"signatures", r.stored.signatures},
                        {"already_present", r.stored.already_present}};
}

absl::StatusOr<ImageReference> EnforcePolicyFlag(const std::string& policy_path,
                                                 RegistryClient& client,
                                                 const ImageReference& ref) {
  if (policy_path.empty()) return ref;
  ASSIGN_OR_RETURN(TrustPolicy policy, TrustPolicy::LoadFile(policy_path));
  ASSIGN_OR_RETURN(TrustCheck check, EnforcePolicy(policy, client, ref));
  fprintf(stderr, "%s\n",
          EscapeUntrusted(absl::StrCat("policy ", policy_path, " accepts ", ref.String(), " (",
                                       check.manifest_digest.str(), "), scope ",
                                       check.verdict.scope, " (", check.verdict.requirement, ")"))
              .c_str());
  return check.pinned;
}

absl::Status RunVerifyReference(const VerifyRefCli& c) {
  if (c.policy.empty() == c.key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("verify ", c.ref, ": give exactly one of --policy FILE or --key PUB"));
  }
  ASSIGN_OR_RETURN(ImageReference ref, ImageReference::Parse(c.ref));
  std::vector<PolicyRequirement> key_requirement;
  std::optional<TrustPolicy> policy;
  if (!c.policy.empty()) {
    ASSIGN_OR_RETURN(policy, TrustPolicy::LoadFile(c.policy));
  } else {
    // --key: a signature by this key for this repository, whatever tag it names, as cosign
    // verify --key accepts cosign's repository-only identity.
    ASSIGN_OR_RETURN(PublicKey pub, PublicKey::FromFile(c.key));
    PolicyRequirement r;
    r.type = PolicyRequirement::Type::kSigstoreSigned;
    r.keys.push_back(std::move(pub));
    r.identity = IdentityMatch::kMatchRepository;
    key_requirement.push_back(std::move(r));
  }
  ASSIGN_OR_RETURN(auto client,
                   ConnectRegistry(ref, HostCapability::kPull,
                                   Access(c.plain_http, c.hosts_dir, c.docker_config)));
  ASSIGN_OR_RETURN(Digest digest, ResolveManifestDigest(*client, ref));
  RegistrySignatureStore store(client.get());
  TrustVerdict v = policy.has_value()
                       ? Evaluate(*policy, ref, digest, store)
                       : EvaluateRequirements(key_requirement, "--key", ref, digest, store);
  if (c.json) {
    printf("%s\n", VerdictJson(c, ref, digest, v).dump(2).c_str());
  } else {
    printf("reference  %s\n", EscapeUntrusted(ref.String()).c_str());
    printf("digest     %s\n", digest.str().c_str());
    printf("policy     %s, scope %s: %s (%s)\n",
           EscapeUntrusted(c.policy.empty() ? "--key " + c.key : c.policy).c_str(),
           EscapeUntrusted(v.scope).c_str(), v.requirement.c_str(),
           std::string(IdentityMatchName(v.identity)).c_str());
    if (!v.sig_manifest_digest.empty()) {
      printf("signatures %s:%s (%s), %zu checked\n", EscapeUntrusted(ref.Name()).c_str(),
             SignatureTag(digest).c_str(), v.sig_manifest_digest.str().c_str(),
             v.signatures.size());
    }
    for (const SignatureCheck& s : v.signatures) {
      std::string line = absl::StrCat("  ", std::string(ReasonName(s.outcome)), "  ",
                                      std::string(s.layer_digest.short_hex()));
      if (!s.key.empty()) {
        absl::StrAppend(&line, "  key ", s.key, " (", s.key_fingerprint.substr(7, 12), ")");
      }
      if (!s.docker_reference.empty()) absl::StrAppend(&line, "  identity ", s.docker_reference);
      if (!s.detail.empty()) absl::StrAppend(&line, "  ", s.detail);
      printf("%s\n", EscapeUntrusted(line).c_str());
    }
    printf("verdict    %s\n",
           v.accepted ? "accepted"
                      : EscapeUntrusted(absl::StrCat("refused: ", std::string(ReasonName(v.reason)),
                                                     ": ", v.message))
                            .c_str());
  }
  return VerdictStatus(v, ref, digest, c.policy.empty() ? "--key " + c.key : c.policy);
}

void RegisterSign(CLI::App& app, Context& ctx) {
  auto c = std::make_shared<SignCli>();
  CLI::App* cmd = app.add_subcommand(
      "sign", "Sign the manifest REF resolves to, in cosign's format (a sha256-<hex>.sig tag)");
  cmd->add_option("REF", c->ref, "registry/repo:tag or registry/repo@sha256:...")->required();
  cmd->add_option("--key", c->key,
                  "ECDSA P-256 private key: PEM, or cosign's encrypted key (passphrase from "
                  "COSIGN_PASSWORD)")
      ->required();
  cmd->add_flag("--plain-http", c->plain_http,
                "Talk plain HTTP to this registry (only for hosts you trust, e.g. loopback)");
  cmd->add_option("--hosts-dir", c->hosts_dir, "containerd-style certs.d directory");
  cmd->add_option("--docker-config", c->docker_config, "docker config.json with credentials");
  cmd->add_flag("--json", c->json, "Print JSON");
  cmd->footer("Exit codes: 0 signed; 1 registry failure; 2 bad reference, key or passphrase");
  cmd->callback([c, &ctx] { ctx.status = RunSign(*c); });
}

}  // namespace modelfs::cli
