// ImageReference: a parsed "registry/repository[:tag][@digest]" as docker and containerd spell it.
//
// Thread safety: a value type; const methods are safe to call concurrently.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/oci/digest.h"

namespace modelfs {

// The name docker uses for Docker Hub in references and the host that serves its API.
inline constexpr char kDockerHubName[] = "docker.io";
inline constexpr char kDockerHubApiHost[] = "registry-1.docker.io";

class ImageReference {
 public:
  // Parses "reg:5000/ns/repo:tag@sha256:<hex>". Rules follow docker/distribution's reference
  // grammar: the first path component is a registry only when it holds '.' or ':' or is
  // "localhost" (otherwise docker.io, and a single-component name gains "library/"); path
  // components are lowercase [a-z0-9] joined by '.', '_', '__' or dashes; a tag is
  // [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}; a name without tag or digest gets the tag "latest".
  // Both a tag and a digest may be given; the digest is what gets fetched.
  // Errors: kInvalidArgument naming the reference and what is wrong with it.
  static absl::StatusOr<ImageReference> Parse(std::string_view ref);

  // "docker.io", "reg:5000", "localhost:5000" (as written, docker.io normalised).
  const std::string& registry() const { return registry_; }
  // The host[:port] that serves the Distribution API ("registry-1.docker.io" for docker.io).
  std::string api_host() const;
  // "library/ubuntu", "ns/repo".
  const std::string& repository() const { return repository_; }
  // Empty when the reference had only a digest.
  const std::string& tag() const { return tag_; }
  const std::optional<Digest>& digest() const { return digest_; }
  // What to ask /v2/<repo>/manifests/ for: the digest when present, otherwise the tag.
  std::string ManifestReference() const;

  // The canonical form: "docker.io/library/ubuntu:latest", "reg:5000/a/b:t@sha256:...".
  std::string String() const;
  // registry/repository, without tag or digest.
  std::string Name() const;

  friend bool operator==(const ImageReference& a, const ImageReference& b) {
    return a.String() == b.String();
  }

 private:
  std::string registry_;
  std::string repository_;
  std::string tag_;
  std::optional<Digest> digest_;
};

// Checks a repository path ("ns/repo") against the grammar above. Errors: kInvalidArgument.
absl::Status ValidateRepository(std::string_view repository);

}  // namespace modelfs
