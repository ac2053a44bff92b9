// Registry credentials: docker's config.json (`auths`, and which credential helper serves a
// registry: `credHelpers`, `credsStore`) and explicit entries from modelfs's own configuration.
// Running the helpers is keychain.h's business. Secrets never appear in logs or Status messages:
// Credential has no printer, and errors name the file and registry, never a value.
//
// Thread safety: CredentialStore is a value; const methods are safe to call concurrently,
// Add() needs external synchronisation.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace modelfs {

struct Credential {
  std::string username;
  std::string password;
  // docker's "identitytoken": an OAuth2 refresh token exchanged at the token realm.
  std::string identity_token;
  // docker's "registrytoken": a bearer token sent as is.
  std::string registry_token;

  bool empty() const {
    return username.empty() && password.empty() && identity_token.empty() && registry_token.empty();
  }
};

class CredentialStore {
 public:
  // Parses config.json text. `source` names the file in errors.
  // Errors: kInvalidArgument (bad JSON, bad base64 or an `auth` without a ':', a helper name
  // that is not a plain name), naming the file and the registry key, never the secret.
  static absl::StatusOr<CredentialStore> FromDockerConfigJson(std::string_view json,
                                                              const std::string& source);
  // Reads a config.json; a missing file is an empty store. Errors: as above, kInternal on I/O.
  static absl::StatusOr<CredentialStore> LoadDockerConfig(const std::string& path);
  // $DOCKER_CONFIG/config.json, else $HOME/.docker/config.json; missing files are empty stores.
  static absl::StatusOr<CredentialStore> LoadDefault();
  // The path LoadDefault reads ("" when neither variable is set).
  static std::string DefaultDockerConfigPath();

  // Explicit entries (modelfs's config) replace config.json entries for the same registry.
  void Add(std::string_view registry, Credential credential);
  // Merges `other` into this store; entries in `other` win.
  void Merge(const CredentialStore& other);

  // Looks a registry ("reg:5000", "docker.io") up. Keys are normalised the way docker writes
  // them: "https://reg:5000/v1/" and "reg:5000" are the same entry; docker.io,
  // index.docker.io and registry-1.docker.io are one.
  std::optional<Credential> Lookup(std::string_view registry) const;
  size_t size() const { return entries_.size(); }

  // The credential helper docker would ask for `registry`: its `credHelpers` entry, else
  // `credsStore`, else "" (the `auths` entries). The name without "docker-credential-".
  std::string HelperFor(std::string_view registry) const;

  // The key Lookup uses for a registry or a config.json auths key.
  static std::string NormalizeKey(std::string_view registry_or_url);

 private:
  std::map<std::string, Credential> entries_;
  std::map<std::string, std::string> helpers_;  // credHelpers, by normalised key
  std::string default_helper_;                  // credsStore
};

}  // namespace modelfs
