// Shared plumbing for the modelfs CLI: each command registers a CLI11 subcommand whose callback
// stores an absl::Status in the context; main() turns it into the documented exit code.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/formats/pickle_scan.h"
#include "core/oci/model_identity.h"
#include "core/registry/reference.h"
#include "core/registry/registry_client.h"
#include "core/resolve/model_ref.h"
#include "core/resolve/registry_clients.h"
#include "core/text/number_format.h"  // WithCommas, for every command's text output
#include "core/trust/keys.h"
#include "nlohmann/json.hpp"

namespace modelfs::cli {

struct Context {
  absl::Status status;  // result of the command that ran
};

void RegisterInspect(CLI::App& app, Context& ctx);
void RegisterMemory(CLI::App& app, Context& ctx);
void RegisterDigest(CLI::App& app, Context& ctx);
void RegisterRegistryCommands(CLI::App& app, Context& ctx);  // push, convert, pull
void RegisterFetch(CLI::App& app, Context& ctx);             // fetch (Hugging Face Hub)
void RegisterVerify(CLI::App& app, Context& ctx);  // verify DIR (lock file) or REF (signatures)
void RegisterSign(CLI::App& app, Context& ctx);    // sign REF
void RegisterStateCommands(CLI::App& app, Context& ctx);  // state push, state list
void RegisterDiff(CLI::App& app, Context& ctx);           // diff REF_A REF_B (tensor_commands.cc)
// node ls, node prefetch, node evict (node_command.cc; built with the snapshotter's gRPC parts,
// MODELFS_NODE_COMMANDS).
void RegisterNodeCommands(CLI::App& app, Context& ctx);
void RegisterAttest(CLI::App& app, Context& ctx);  // attest equivalence

// The registry flags of every command that talks to a registry (push, convert, pull, diff,
// attest, ...): --plain-http, --hosts-dir (default /etc/containerd/certs.d), --docker-config and
// --json (registry_commands.cc).
struct RegistryFlags {
  bool plain_http = false;
  std::string hosts_dir;
  std::string docker_config;
  bool json = false;
};
void AddRegistryFlags(CLI::App* cmd, RegistryFlags& f);
RegistryAccessOptions AccessOptions(const RegistryFlags& f);

// Signing and policy plumbing shared by sign, verify, push, convert, mount and pull
// (trust_commands.cc).
struct VerifyRefCli {
  std::string ref;
  std::string policy;       // --policy FILE
  std::string key;          // --key PUB
  std::string attestation;  // --attestation equivalence: check attestations, not signatures
  bool plain_http = false;
  std::string hosts_dir = "/etc/containerd/certs.d";
  std::string docker_config;
  bool json = false;
};
absl::Status RunVerifyReference(const VerifyRefCli& c);
// verify REF --attestation equivalence --key PUB (attest_command.cc).
absl::Status RunVerifyAttestation(const VerifyRefCli& c);
// Loads a signing key (--key, --sign-key); COSIGN_PASSWORD opens an encrypted one. Every failure
// is bad input (exit 2), a wrong passphrase included.
absl::StatusOr<PrivateKey> LoadSigningKey(const std::string& path);
// Signs `digest` as `image` (a tag reference) and stores it; prints a line (stdout, or stderr
// when `json`) and returns the stored result as JSON.
absl::StatusOr<nlohmann::json> SignAndReport(RegistryClient& client, const ImageReference& image,
                                             const Digest& digest, const PrivateKey& key,
                                             bool json);
// With a non-empty `policy_path`: evaluates the policy for `ref` before anything is fetched and
// returns `ref` pinned to the verified digest; a refusal is kPermissionDenied naming the reference,
// digest, scope and reason. Empty path: `ref` unchanged.
absl::StatusOr<ImageReference> EnforcePolicyFlag(const std::string& policy_path,
                                                 RegistryClient& client, const ImageReference& ref);
// mount, umount, stats; argv is re-executed for a background mount.
void RegisterMountCommands(CLI::App& app, Context& ctx, const std::vector<std::string>& argv);

// inspect on pickle checkpoints (inspect_pickle.cc): the paths that are pickle files (named
// so, or zip/pickle bytes under another name; in a directory, its pickle-named files) are
// scanned; the rest is left for InspectModel.
struct PickleInspection {
  std::vector<PickleScan> scans;
  std::vector<std::string> other_paths;
};
absl::StatusOr<PickleInspection> InspectPickles(const std::vector<std::string>& paths,
                                                bool insecure);
// kPermissionDenied naming every flagged import (inspect exits 1), else OK.
absl::Status PickleVerdict(const PickleInspection& inspection);

// inspect REF (inspect_ref.cc): a model in a registry, from its manifest and config.
struct RefInspection {
  struct Layer {
    std::string path, digest;
    uint64_t size = 0;
    std::string kind;
    // From V's chunk index for the layer: "blake3" or "sha256", and its chunk size; "" and 0
    // when the layer is verified whole (no volume image, or no index for it).
    std::string chunk_digest;
    uint64_t chunk_size = 0;
  };
  std::string reference, repository, manifest, volume;
  std::string name, format, param_size, precision;
  nlohmann::json config;  // the config blob as stored
  ModelIdentity identity;
  std::map<std::string, std::string> annotations;  // M's
  std::vector<Layer> layers;
  bool image = false;  // an ordinary container image (its layers are merged, not files)
};
// An argument that is no local path or URL and starts with a registry host ("host.tld/",
// "host:port/", "localhost/").
bool LooksLikeRegistryReference(const std::string& arg);
// Reaches the registry as every other command does: certs.d (hosts.toml, CAs), --plain-http,
// the docker config.
absl::StatusOr<RefInspection> InspectReference(const std::string& ref,
                                               const RegistryAccessOptions& access);
nlohmann::json RefInspectionToJson(const RefInspection& r);
// inspect --tensors REF (tensor_commands.cc): every tensor of the model, from V's tensor index
// (no weight bytes) or its files' headers and hashed layers.
absl::Status InspectReferenceTensors(const std::string& ref, const RegistryAccessOptions& access,
                                     bool json);
std::string RenderRefInspection(const RefInspection& r);

// For resolving `volume`: says on stderr when the volume image sends the CLI outside its own
// repository for its model (another repository, or another registry), naming both. The CLI
// follows it (the user chose the reference); the snapshotter does so only where its
// model_hosts allows.
ModelLocationCheck NotingLocation(const ImageReference& volume);

bool StdoutIsTty();
bool StderrIsTty();

}  // namespace modelfs::cli
