#include "core/registry/credentials.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace modelfs {

std::string CredentialStore::NormalizeKey(std::string_view registry_or_url) {
  std::string k(registry_or_url);
  if (size_t sep = k.find("://"); sep != std::string::npos) k = k.substr(sep + 3);
  if (size_t slash = k.find('/'); slash != std::string::npos) k = k.substr(0, slash);
  k = absl::AsciiStrToLower(k);
  if (k == "index.docker.io" || k == "registry-1.docker.io" || k == "docker.io") {
    return "docker.io";
  }
  return k;
}

absl::StatusOr<CredentialStore> CredentialStore::FromDockerConfigJson(std::string_view json,
                                                                      const std::string& source) {
  CredentialStore store;
  nlohmann::json doc = nlohmann::json::parse(json.begin(), json.end(), nullptr,
                                             /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  }
  // A helper name becomes part of a program name looked up on $PATH: no '/', no spaces.
  auto helper_name = [&](const nlohmann::json& v, const std::string& where,
                         std::string& out) -> absl::Status {
    if (!v.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": ", where, " must be a string"));
    }
    out = v.get<std::string>();
    for (char ch : out) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' &&
          ch != '.') {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ": ", where, " \"", out, "\" is not a credential helper name"));
      }
    }
    return absl::OkStatus();
  };
  if (auto it = doc.find("credsStore"); it != doc.end()) {
    if (absl::Status st = helper_name(*it, "\"credsStore\"", store.default_helper_); !st.ok()) {
      return st;
    }
  }
  if (auto it = doc.find("credHelpers"); it != doc.end()) {
    if (!it->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": \"credHelpers\" must be an object"));
    }
    for (const auto& item : it->items()) {
      std::string name;
      if (absl::Status st = helper_name(
              item.value(), absl::StrCat("credHelpers entry \"", item.key(), "\""), name);
          !st.ok()) {
        return st;
      }
      if (!name.empty()) store.helpers_[NormalizeKey(item.key())] = name;
    }
  }
  auto auths = doc.find("auths");
  if (auths == doc.end()) return store;
  if (!auths->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": \"auths\" must be an object"));
  }
  for (const auto& item : auths->items()) {
    const std::string& key = item.key();
    const nlohmann::json& entry = item.value();
    if (!entry.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": auths entry \"", key, "\" must be an object"));
    }
    auto str = [&](const char* field) -> std::string {
      auto it = entry.find(field);
      return it != entry.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    Credential c;
    c.username = str("username");
    c.password = str("password");
    c.identity_token = str("identitytoken");
    c.registry_token = str("registrytoken");
    std::string auth = str("auth");
    if (!auth.empty()) {
      std::string decoded;
      if (!absl::Base64Unescape(auth, &decoded)) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ": auths entry \"", key, "\" has an \"auth\" that is not base64"));
      }
      size_t colon = decoded.find(':');
      if (colon == std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(
            source, ": auths entry \"", key, "\" has an \"auth\" that is not user:password"));
      }
      c.username = decoded.substr(0, colon);
      c.password = decoded.substr(colon + 1);
    }
    if (c.empty()) continue;  // docker leaves {} entries behind when a credsStore holds them
    store.entries_[NormalizeKey(key)] = std::move(c);
  }
  return store;
}

absl::StatusOr<CredentialStore> CredentialStore::LoadDockerConfig(const std::string& path) {
  std::error_code ec;
  if (path.empty() || !std::filesystem::exists(path, ec)) return CredentialStore();
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InternalError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return FromDockerConfigJson(ss.str(), path);
}

std::string CredentialStore::DefaultDockerConfigPath() {
  if (const char* d = std::getenv("DOCKER_CONFIG"); d != nullptr && *d != '\0') {
    return absl::StrCat(d, "/config.json");
  }
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') {
    return absl::StrCat(h, "/.docker/config.json");
  }
  return "";
}

absl::StatusOr<CredentialStore> CredentialStore::LoadDefault() {
  return LoadDockerConfig(DefaultDockerConfigPath());
}

void CredentialStore::Add(std::string_view registry, Credential credential) {
  entries_[NormalizeKey(registry)] = std::move(credential);
}

void CredentialStore::Merge(const CredentialStore& other) {
  for (const auto& [k, v] : other.entries_) entries_[k] = v;
  for (const auto& [k, v] : other.helpers_) helpers_[k] = v;
  if (!other.default_helper_.empty()) default_helper_ = other.default_helper_;
}

std::string CredentialStore::HelperFor(std::string_view registry) const {
  auto it = helpers_.find(NormalizeKey(registry));
  return it != helpers_.end() ? it->second : default_helper_;
}

std::optional<Credential> CredentialStore::Lookup(std::string_view registry) const {
  auto it = entries_.find(NormalizeKey(registry));
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

}  // namespace modelfs
