// Reaching registries for pulls: ConnectRegistry opens a client with the node's hosts.toml and
// its credentials (kubelet credential provider plugins, then the docker config with its
// helpers: MakeKeychain); RegistryClients keeps one client per registry, opened on first use,
// all sharing one keychain (so helper answers and plugin caches are shared).
//
// Thread safety: RegistryClients and its clients are thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/registry/credentials.h"
#include "core/registry/hosts.h"
#include "core/registry/keychain.h"
#include "core/registry/reference.h"
#include "core/registry/registry_client.h"

namespace modelfs {

struct RegistryAccessOptions {
  HostsOptions hosts;         // --plain-http, certs.d directory
  std::string docker_config;  // explicit config.json; empty: see default_docker_config
  // With docker_config empty: true (the CLI), $DOCKER_CONFIG / ~/.docker/config.json when there
  // is one; false (the daemon), no credentials at all.
  bool default_docker_config = true;
  // A kubelet CredentialProviderConfig (JSON) and the plugins' directory; both or neither.
  std::string credential_provider_config;
  std::string credential_provider_bin_dir;
  // Set: the credentials, as is (the fields above are not read for credentials).
  std::shared_ptr<Keychain> keychain;
  RegistryClientOptions client;  // timeouts and retry policy
};

// The keychain the options describe: the kubelet plugins when configured, then the docker
// config (docker_config, else the default one when default_docker_config). Asked per registry in
// that order: the first source with a credential for it wins (docs/snapshotter.md).
// Errors: kInvalidArgument (a config.json or CredentialProviderConfig that does not parse, one
// of the two provider settings without the other), kNotFound (a provider config or plugin that
// is missing), naming the file.
absl::StatusOr<std::shared_ptr<Keychain>> MakeKeychain(const RegistryAccessOptions& o);

// Opens a client for ref's registry with the capability needed, credentials from the docker
// config. Errors: kInvalidArgument (bad hosts.toml / config.json).
absl::StatusOr<std::unique_ptr<RegistryClient>> ConnectRegistry(const ImageReference& ref,
                                                                HostCapability capability,
                                                                const RegistryAccessOptions& o);
// The same by registry name ("reg:5000", "docker.io").
absl::StatusOr<std::unique_ptr<RegistryClient>> ConnectRegistry(const std::string& registry,
                                                                HostCapability capability,
                                                                const RegistryAccessOptions& o);

// Opens (or returns an open) client for a registry by name ("host[:port]").
using RegistryConnector =
    std::function<absl::StatusOr<std::shared_ptr<RegistryClient>>(const std::string& registry)>;

// One pull client per registry, opened on first use: by ConnectRegistry with the same access
// options (each registry with its own hosts.toml and credentials), or by the opener given (the
// snapshotter's unit tests). The one client map of the tree: the CLI's commands and the
// snapshotter ask it, and ResolveModel reaches other registries through its Connector.
// Thread-safe; no lock is held while a client is opened.
class RegistryClients {
 public:
  explicit RegistryClients(RegistryAccessOptions options);
  // `open` makes the client of a registry not asked for before; what it returns is kept.
  explicit RegistryClients(RegistryConnector open) : open_(std::move(open)) {}
  // The client for `registry`. Errors: the opener's (ConnectRegistry's); not kept, so the next
  // call tries again.
  absl::StatusOr<std::shared_ptr<RegistryClient>> For(const std::string& registry);
  RegistryConnector Connector() {
    return [this](const std::string& registry) { return For(registry); };
  }

 private:
  const RegistryConnector open_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<RegistryClient>> clients_ ABSL_GUARDED_BY(mu_);
};

}  // namespace modelfs
