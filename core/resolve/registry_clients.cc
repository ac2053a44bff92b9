#include "core/resolve/registry_clients.h"

#include <utility>

#include "core/registry/kubelet_credential_provider.h"
#include "core/status/status_macros.h"

namespace modelfs {

absl::StatusOr<std::unique_ptr<RegistryClient>> ConnectRegistry(const ImageReference& ref,
                                                                HostCapability capability,
                                                                const RegistryAccessOptions& o) {
  return ConnectRegistry(ref.registry(), capability, o);
}

absl::StatusOr<std::shared_ptr<Keychain>> MakeKeychain(const RegistryAccessOptions& o) {
  if (o.keychain != nullptr) return o.keychain;
  if (o.credential_provider_config.empty() != o.credential_provider_bin_dir.empty()) {
    return absl::InvalidArgumentError(
        "credential_provider_config and credential_provider_bin_dir go together: set both or "
        "neither");
  }
  std::vector<std::shared_ptr<Keychain>> chain;
  if (!o.credential_provider_config.empty()) {
    KubeletCredentialProviders::Options ko;
    ko.config_path = o.credential_provider_config;
    ko.bin_dir = o.credential_provider_bin_dir;
    ko.clock = o.client.clock;
    ASSIGN_OR_RETURN(std::shared_ptr<Keychain> k, KubeletCredentialProviders::Create(ko));
    chain.push_back(std::move(k));
  }
  std::string docker_config = o.docker_config;
  if (docker_config.empty() && o.default_docker_config) {
    docker_config = CredentialStore::DefaultDockerConfigPath();
  }
  if (!docker_config.empty()) {
    DockerConfigKeychain::Options d;
    d.path = docker_config;
    d.clock = o.client.clock;
    ASSIGN_OR_RETURN(std::shared_ptr<Keychain> k, DockerConfigKeychain::Create(d));
    chain.push_back(std::move(k));
  }
  if (chain.empty()) return StaticKeychain(CredentialStore());
  return ChainKeychains(std::move(chain));
}

absl::StatusOr<std::unique_ptr<RegistryClient>> ConnectRegistry(const std::string& registry,
                                                                HostCapability capability,
                                                                const RegistryAccessOptions& o) {
  ASSIGN_OR_RETURN(std::shared_ptr<Keychain> keychain, MakeKeychain(o));
  return RegistryClient::ForRegistry(registry, capability, o.hosts, std::move(keychain), o.client);
}

RegistryClients::RegistryClients(RegistryAccessOptions options)
    // The keychain is made before `options` is moved into the lambda (captures initialise in
    // order, from the constructor's parameter).
    : open_([keychain =
                 std::make_shared<absl::StatusOr<std::shared_ptr<Keychain>>>(MakeKeychain(options)),
             options = std::move(options)](
                const std::string& registry) -> absl::StatusOr<std::shared_ptr<RegistryClient>> {
        if (!keychain->ok()) return keychain->status();
        RegistryAccessOptions o = options;
        o.keychain = **keychain;
        return ConnectRegistry(registry, HostCapability::kPull, o);
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
