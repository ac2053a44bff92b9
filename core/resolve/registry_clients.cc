#include "core/resolve/registry_clients.h"

#include <utility>

#include "core/status/status_macros.h"

namespace modelfs {

absl::StatusOr<std::unique_ptr<RegistryClient>> ConnectRegistry(const ImageReference& ref,
                                                                HostCapability capability,
                                                                const RegistryAccessOptions& o) {
  return ConnectRegistry(ref.registry(), capability, o);
}

absl::StatusOr<std::unique_ptr<RegistryClient>> ConnectRegistry(const std::string& registry,
                                                                HostCapability capability,
                                                                const RegistryAccessOptions& o) {
  CredentialStore creds;
  if (!o.docker_config.empty()) {
    ASSIGN_OR_RETURN(creds, CredentialStore::LoadDockerConfig(o.docker_config));
  } else if (o.default_docker_config) {
    if (auto loaded = CredentialStore::LoadDefault(); loaded.ok()) {
      creds = *std::move(loaded);
    } else if (!absl::IsNotFound(loaded.status())) {
      return loaded.status();
    }
  }
  return RegistryClient::ForRegistry(registry, capability, o.hosts, creds, o.client);
}

RegistryClients::RegistryClients(RegistryAccessOptions options)
    : open_([options = std::move(options)](
                const std::string& registry) -> absl::StatusOr<std::shared_ptr<RegistryClient>> {
        return ConnectRegistry(registry, HostCapability::kPull, options);
      }) {}

absl::StatusOr<std::shared_ptr<RegistryClient>> RegistryClients::For(const std::string& registry) {
  {
    absl::MutexLock l(&mu_);
    auto it = clients_.find(registry);
    if (it != clients_.end()) return it->second;
  }
  ASSIGN_OR_RETURN(std::shared_ptr<RegistryClient> client, open_(registry));
  absl::MutexLock l(&mu_);
  return clients_.emplace(registry, std::move(client)).first->second;
}

}  // namespace modelfs
