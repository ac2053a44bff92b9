// TrustPolicy: the containers-policy.json(5) file that CRI-O and Podman read, with the parts
// that apply to pulling models from registries, evaluated with containers/image's semantics.
//
// Read:
//  - "default" (required, as in c/image) and "transports"."docker" scopes. Scope lookup for an
//    image, most specific first: "host/repo:tag" or "host/repo@digest" (the exact reference),
//    "host/repo", each parent namespace "host/ns", "host", then "*.domain" wildcards of the
//    host, then the docker transport's "" scope, then "default".
//  - requirements "insecureAcceptAnything", "reject" and "sigstoreSigned" with exactly one of
//    "keyPath" (absolute), "keyPaths", "keyData" (base64 PEM) or "keyDatas", and an optional
//    "signedIdentity" of type "matchRepoDigestOrExact" (the default), "matchRepository" or
//    "matchExact".
// Refused at load, with a message naming the file and the field: any other requirement type
// ("signedBy", "signedBaseLayer"...), sigstoreSigned with "fulcio", "rekorPublicKey*" or
// "pki", other signedIdentity types ("exactReference", "exactRepository", "remapIdentity"...),
// unknown keys anywhere, an empty requirement list, a key that is not EC P-256, a relative key
// path. Other transports' sections are parsed by the same rules (so a typo is never ignored)
// but never used.
//
// Keys are read when the policy is loaded; files() lists every file read, so a caller that
// keeps a policy can notice when it, or a key it names, changed (PolicyStamp).
//
// Thread safety: immutable after loading; const methods may be called concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/registry/reference.h"
#include "core/trust/keys.h"

namespace modelfs {

enum class IdentityMatch { kMatchRepoDigestOrExact, kMatchRepository, kMatchExact };
std::string_view IdentityMatchName(IdentityMatch match);  // the policy.json spelling

struct PolicyRequirement {
  enum class Type { kInsecureAcceptAnything, kReject, kSigstoreSigned };
  Type type = Type::kReject;
  // kSigstoreSigned: a signature is accepted when any of these keys verifies it.
  std::vector<PublicKey> keys;
  IdentityMatch identity = IdentityMatch::kMatchRepoDigestOrExact;
};
std::string_view RequirementTypeName(PolicyRequirement::Type type);  // the policy.json spelling

// The requirements that apply to one image and the scope they came from.
struct PolicyScope {
  // "default", "docker:" (the transport's "" scope) or "docker:<scope>" as written.
  std::string name;
  const std::vector<PolicyRequirement>* requirements = nullptr;
};

class TrustPolicy {
 public:
  // Parses policy JSON; `source` names it in messages (the file path). Errors: kInvalidArgument
  // naming source and the offending field or value; kNotFound for a missing key file.
  static absl::StatusOr<TrustPolicy> Parse(std::string_view json, std::string_view source);
  // Reads `path` (at most 1 MiB) and parses it.
  static absl::StatusOr<TrustPolicy> LoadFile(const std::string& path);

  // The scope that applies to `image` (lookup order above). Never fails: "default" is required.
  PolicyScope ScopeFor(const ImageReference& image) const;

  // The policy file and every key file it names, in the order read.
  const std::vector<std::string>& files() const { return files_; }
  const std::string& source() const { return source_; }

 private:
  TrustPolicy() = default;
  std::string source_;
  std::vector<std::string> files_;
  std::vector<PolicyRequirement> default_;
  bool has_docker_default_ = false;
  std::vector<PolicyRequirement> docker_default_;
  std::vector<std::pair<std::string, std::vector<PolicyRequirement>>> docker_scopes_;
};

// What identifies the state of a set of files (a policy and its keys), to tell when a kept
// policy must be loaded again: each file's device, inode, size and mtime (nanoseconds). A
// missing file is recorded as such, so its reappearance is a change too.
struct PolicyStamp {
  struct File {
    std::string path;
    bool exists = false;
    uint64_t dev = 0, ino = 0, size = 0;
    int64_t mtime_ns = 0;
    friend bool operator==(const File&, const File&) = default;
  };
  std::vector<File> files;
  friend bool operator==(const PolicyStamp&, const PolicyStamp&) = default;
};
PolicyStamp StampFiles(const std::vector<std::string>& paths);

}  // namespace modelfs
