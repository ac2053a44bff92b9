// containers-policy.json parsing (the subset in policy.h) and scope lookup.
#include "core/trust/policy.h"

#include <sys/stat.h>

#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status/status_macros.h"
#include "core/trust/strict_json.h"

namespace modelfs {

using trust_internal::ExpectExactKeys;
using trust_internal::ExpectKnownKeys;
using trust_internal::Json;
using trust_internal::S;

namespace {

constexpr size_t kMaxPolicySize = 1 << 20;
constexpr size_t kMaxKeysPerRequirement = 64;

absl::Status Bad(std::string_view where, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(S(where), ": ", S(why)));
}

absl::StatusOr<IdentityMatch> ParseSignedIdentity(const Json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return Bad(where, "signedIdentity needs a string \"type\"");
  }
  const std::string type = j["type"].get<std::string>();
  IdentityMatch match;
  if (type == "matchRepoDigestOrExact") {
    match = IdentityMatch::kMatchRepoDigestOrExact;
  } else if (type == "matchRepository") {
    match = IdentityMatch::kMatchRepository;
  } else if (type == "matchExact") {
    match = IdentityMatch::kMatchExact;
  } else {
    return Bad(where, absl::StrCat("signedIdentity type \"", type,
                                   "\" is not supported by modelfs (supported: "
                                   "matchRepoDigestOrExact, matchRepository, matchExact)"));
  }
  RETURN_IF_ERROR(ExpectExactKeys(j, {"type"}, absl::StrCat(where, " signedIdentity")));
  return match;
}

absl::StatusOr<std::vector<std::string>> StringList(const Json& j, const std::string& where) {
  if (!j.is_array() || j.empty() || j.size() > kMaxKeysPerRequirement) {
    return Bad(where, absl::StrCat("must be a non-empty array of at most ", kMaxKeysPerRequirement,
                                   " strings"));
  }
  std::vector<std::string> out;
  for (const Json& e : j) {
    if (!e.is_string()) return Bad(where, "must hold strings");
    out.push_back(e.get<std::string>());
  }
  return out;
}

class Parser {
 public:
  explicit Parser(std::string source) : source_(std::move(source)) {}

  absl::StatusOr<std::vector<PolicyRequirement>> Requirements(const Json& j,
                                                              const std::string& where) {
    if (!j.is_array()) return Bad(where, "must be an array of requirements");
    if (j.empty()) return Bad(where, "the list of requirements must not be empty");
    std::vector<PolicyRequirement> out;
    for (size_t i = 0; i < j.size(); ++i) {
      ASSIGN_OR_RETURN(PolicyRequirement r, Requirement(j[i], absl::StrCat(where, "[", i, "]")));
      out.push_back(std::move(r));
    }
    return out;
  }

  std::vector<std::string> TakeFiles() { return std::move(files_); }

 private:
  absl::StatusOr<PolicyRequirement> Requirement(const Json& j, const std::string& where) {
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
      return Bad(where, "a requirement needs a string \"type\"");
    }
    const std::string type = j["type"].get<std::string>();
    PolicyRequirement r;
    if (type == "insecureAcceptAnything" || type == "reject") {
      RETURN_IF_ERROR(ExpectExactKeys(j, {"type"}, where));
      r.type = type == "reject" ? PolicyRequirement::Type::kReject
                                : PolicyRequirement::Type::kInsecureAcceptAnything;
      return r;
    }
    if (type != "sigstoreSigned") {
      return Bad(where, absl::StrCat("requirement type \"", type,
                                     "\" is not supported by modelfs (supported: "
                                     "insecureAcceptAnything, reject, sigstoreSigned)"));
    }
    r.type = PolicyRequirement::Type::kSigstoreSigned;
    for (const char* keyless : {"fulcio", "rekorPublicKeyPath", "rekorPublicKeyPaths",
                                "rekorPublicKeyData", "rekorPublicKeyDatas", "pki"}) {
      if (j.contains(keyless)) {
        return Bad(where, absl::StrCat("sigstoreSigned \"", keyless,
                                       "\" is not supported by modelfs (keyless Fulcio/Rekor "
                                       "verification is out of scope; use public keys)"));
      }
    }
    RETURN_IF_ERROR(ExpectKnownKeys(
        j, {"type", "keyPath", "keyPaths", "keyData", "keyDatas", "signedIdentity"}, where));
    int sources = j.contains("keyPath") + j.contains("keyPaths") + j.contains("keyData") +
                  j.contains("keyDatas");
    if (sources != 1) {
      return Bad(where, "sigstoreSigned needs exactly one of keyPath, keyPaths, keyData, keyDatas");
    }
    if (j.contains("keyPath")) {
      if (!j["keyPath"].is_string()) return Bad(where, "keyPath must be a string");
      ASSIGN_OR_RETURN(PublicKey k, KeyFile(j["keyPath"].get<std::string>(), where + ".keyPath"));
      r.keys.push_back(std::move(k));
    } else if (j.contains("keyPaths")) {
      ASSIGN_OR_RETURN(auto paths, StringList(j["keyPaths"], where + ".keyPaths"));
      for (const std::string& p : paths) {
        ASSIGN_OR_RETURN(PublicKey k, KeyFile(p, where + ".keyPaths"));
        r.keys.push_back(std::move(k));
      }
    } else {
      std::vector<std::string> datas;
      std::string field = j.contains("keyData") ? "keyData" : "keyDatas";
      if (j.contains("keyData")) {
        if (!j["keyData"].is_string()) return Bad(where, "keyData must be a string");
        datas.push_back(j["keyData"].get<std::string>());
      } else {
        ASSIGN_OR_RETURN(datas, StringList(j["keyDatas"], where + ".keyDatas"));
      }
      for (size_t i = 0; i < datas.size(); ++i) {
        std::string name = absl::StrCat(where, ".", field);
        if (field == "keyDatas") name = absl::StrCat(name, "[", i, "]");
        std::string pem;
        if (!absl::Base64Unescape(datas[i], &pem)) return Bad(name, "not valid base64");
        ASSIGN_OR_RETURN(PublicKey k, PublicKey::FromPem(pem, name));
        r.keys.push_back(std::move(k));
      }
    }
    if (j.contains("signedIdentity")) {
      ASSIGN_OR_RETURN(r.identity, ParseSignedIdentity(j["signedIdentity"], where));
    }
    return r;
  }

  absl::StatusOr<PublicKey> KeyFile(const std::string& path, const std::string& where) {
    if (path.empty() || path[0] != '/') {
      return Bad(where, absl::StrCat("key path \"", path,
                                     "\" must be absolute (a relative path would depend on the "
                                     "reader's working directory)"));
    }
    files_.push_back(path);
    auto key = PublicKey::FromFile(path);
    if (!key.ok()) {
      return absl::Status(key.status().code(), absl::StrCat(where, ": ", key.status().message()));
    }
    return key;
  }

  std::string source_;
  std::vector<std::string> files_;
};

absl::Status ValidateDockerScope(const std::string& scope, const std::string& where) {
  if (scope.empty()) return absl::OkStatus();
  if (absl::StartsWith(scope, "*.")) {
    if (scope.find_first_of("/:@") != std::string::npos || scope.size() < 3) {
      return Bad(where, "a wildcard scope must be \"*.domain\" with no port or path");
    }
    return absl::OkStatus();
  }
  for (char c : scope) {
    if (c <= ' ' || c == '\\' || c == '"') return Bad(where, "scope has invalid characters");
  }
  if (absl::StrContains(scope, "://")) return Bad(where, "a scope has no URL scheme");
  return absl::OkStatus();
}

}  // namespace

std::string_view IdentityMatchName(IdentityMatch match) {
  switch (match) {
    case IdentityMatch::kMatchRepoDigestOrExact:
      return "matchRepoDigestOrExact";
    case IdentityMatch::kMatchRepository:
      return "matchRepository";
    case IdentityMatch::kMatchExact:
      return "matchExact";
  }
  return "unknown";
}

std::string_view RequirementTypeName(PolicyRequirement::Type type) {
  switch (type) {
    case PolicyRequirement::Type::kInsecureAcceptAnything:
      return "insecureAcceptAnything";
    case PolicyRequirement::Type::kReject:
      return "reject";
    case PolicyRequirement::Type::kSigstoreSigned:
      return "sigstoreSigned";
  }
  return "unknown";
}

absl::StatusOr<TrustPolicy> TrustPolicy::Parse(std::string_view json, std::string_view source) {
  const std::string src(source);
  if (json.size() > kMaxPolicySize) {
    return Bad(src, absl::StrCat("policy larger than ", kMaxPolicySize, " bytes"));
  }
  ASSIGN_OR_RETURN(Json j, trust_internal::ParseStrictObject(json, src));
  RETURN_IF_ERROR(ExpectKnownKeys(j, {"default", "transports"}, src));
  if (!j.contains("default"))
    return Bad(src, "\"default\" is missing (containers-policy.json requires it)");
  Parser parser(src);
  TrustPolicy policy;
  policy.source_ = src;
  ASSIGN_OR_RETURN(policy.default_, parser.Requirements(j["default"], src + ": default"));
  if (j.contains("transports")) {
    const Json& transports = j["transports"];
    if (!transports.is_object()) return Bad(src, "\"transports\" must be an object");
    for (const auto& [transport, scopes] : transports.items()) {
      const std::string tw = absl::StrCat(src, ": transports.", transport);
      if (!scopes.is_object()) return Bad(tw, "must be an object of scopes");
      for (const auto& [scope, reqs] : scopes.items()) {
        const std::string sw = absl::StrCat(tw, "[\"", scope, "\"]");
        ASSIGN_OR_RETURN(auto parsed, parser.Requirements(reqs, sw));
        if (transport != "docker") continue;  // parsed for errors, never used
        RETURN_IF_ERROR(ValidateDockerScope(scope, sw));
        if (scope.empty()) {
          policy.has_docker_default_ = true;
          policy.docker_default_ = std::move(parsed);
        } else {
          policy.docker_scopes_.emplace_back(scope, std::move(parsed));
        }
      }
    }
  }
  policy.files_ = parser.TakeFiles();
  return policy;
}

absl::StatusOr<TrustPolicy> TrustPolicy::LoadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("policy ", path, ": cannot be read"));
  std::string data(kMaxPolicySize + 1, '\0');
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<size_t>(in.gcount()));
  ASSIGN_OR_RETURN(TrustPolicy policy, Parse(data, path));
  policy.files_.insert(policy.files_.begin(), path);
  return policy;
}

PolicyScope TrustPolicy::ScopeFor(const ImageReference& image) const {
  // c/image's lookup (docker/policyconfiguration): the exact reference, then the repository
  // and each parent namespace up to the host, then "*.domain" wildcards of the host name.
  std::vector<std::string> candidates;
  const std::string name = image.Name();
  if (image.digest().has_value()) {
    candidates.push_back(absl::StrCat(name, "@", image.digest()->str()));
  } else {
    candidates.push_back(absl::StrCat(name, ":", image.tag()));
  }
  std::string n = name;
  while (true) {
    candidates.push_back(n);
    size_t slash = n.rfind('/');
    if (slash == std::string::npos) break;
    n.resize(slash);
  }
  std::string host = n.substr(0, n.find(':'));
  for (size_t dot = host.find('.'); dot != std::string::npos; dot = host.find('.')) {
    host = host.substr(dot + 1);
    candidates.push_back(absl::StrCat("*.", host));
  }
  for (const std::string& c : candidates) {
    for (const auto& [scope, reqs] : docker_scopes_) {
      if (scope == c) return PolicyScope{absl::StrCat("docker:", scope), &reqs};
    }
  }
  if (has_docker_default_) return PolicyScope{"docker:", &docker_default_};
  return PolicyScope{"default", &default_};
}

PolicyStamp StampFiles(const std::vector<std::string>& paths) {
  PolicyStamp stamp;
  for (const std::string& p : paths) {
    PolicyStamp::File f;
    f.path = p;
    struct stat st;
    if (::stat(p.c_str(), &st) == 0) {
      f.exists = true;
      f.dev = st.st_dev;
      f.ino = st.st_ino;
      f.size = static_cast<uint64_t>(st.st_size);
      f.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    }
    stamp.files.push_back(std::move(f));
  }
  return stamp;
}

}  // namespace modelfs
