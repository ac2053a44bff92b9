// OCI content descriptors (image-spec descriptor.md): what a manifest says about a blob, and
// the platform object of an index entry.
//
// Parsing validates every field it keeps and names the field at fault; serialization is
// compact JSON with sorted keys and no optional field that was not set, so equal values always
// produce equal bytes (and digests).
//
// Thread safety: plain values.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/oci/digest.h"

namespace modelfs {

struct Platform {
  std::string architecture;              // required, e.g. "amd64"
  std::string os;                        // required, e.g. "linux"
  std::string os_version;                // "os.version"
  std::vector<std::string> os_features;  // "os.features"
  std::string variant;
  friend bool operator==(const Platform&, const Platform&) = default;
};

struct Descriptor {
  std::string media_type;  // required
  Digest digest;           // required
  uint64_t size = 0;       // required; at most INT64_MAX on the wire
  std::vector<std::string> urls;
  std::map<std::string, std::string> annotations;
  // Embedded content ("data", base64 on the wire, raw bytes here). When present it must hash to
  // `digest` and have length `size`.
  std::optional<std::string> data;
  std::string artifact_type;  // "artifactType"; empty = absent
  std::optional<Platform> platform;

  // The annotation's value, or nullptr.
  const std::string* Annotation(std::string_view key) const;

  friend bool operator==(const Descriptor&, const Descriptor&) = default;
};

// Parses one descriptor from JSON bytes. Errors: kInvalidArgument naming the field;
// kDataLoss when embedded data does not match the digest.
absl::StatusOr<Descriptor> ParseDescriptor(std::string_view json);
// Compact, sorted-key JSON.
std::string SerializeDescriptor(const Descriptor& d);

// The tag under which the OCI distribution spec's referrers fallback stores the referrers index
// of `subject`: "<alg>-<hex>", e.g. "sha256-0123...".
std::string ReferrersFallbackTag(const Digest& subject);

}  // namespace modelfs
