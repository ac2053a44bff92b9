// The fields of modelfs's own binary indexes (chunk, seek, seek windows, tensor, tar headers):
// little-endian integers and raw SHA-256 digests, and the opening they share (an 8-byte magic,
// then a 4-byte version). Internal to core/oci: the writers and strict parsers of those formats use
// it; nothing else should.
//
// Thread safety: free functions; they keep no state.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/oci/digest.h"

namespace modelfs::index_fields {

inline void PutU8(std::string& out, uint8_t v) { out.push_back(static_cast<char>(v)); }
inline void PutU16(std::string& out, uint16_t v) {
  for (int i = 0; i < 2; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void PutDigest(std::string& out, const Digest& d) {
  const std::array<uint8_t, 32> raw = d.raw();
  out.append(reinterpret_cast<const char*>(raw.data()), raw.size());
}

// The `n`-byte little-endian integer at `at`; the caller has checked that b holds it.
inline uint64_t GetLE(std::string_view b, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i)
    v |= static_cast<uint64_t>(static_cast<uint8_t>(b[at + i])) << (8 * i);
  return v;
}
// The raw SHA-256 digest at `at`; the caller has checked that b holds its 32 bytes.
inline Digest GetDigest(std::string_view b, size_t at) {
  std::array<uint8_t, 32> raw;
  memcpy(raw.data(), b.data() + at, 32);
  return Digest::FromRaw(raw);
}

// Checks the opening of an index named `what` ("chunk index"): 12 bytes at least, starting
// with `magic` (7 letters and a NUL), and returns the version that follows. Errors:
// kOutOfRange "<what>: truncated: ...", kInvalidArgument "<what>: bad magic (want ...)".
inline absl::StatusOr<uint64_t> ReadVersion(std::string_view bytes, std::string_view magic,
                                            std::string_view what) {
  if (bytes.size() < 12) {
    return absl::OutOfRangeError(absl::StrCat(std::string(what), ": truncated: ", bytes.size(),
                                              " bytes, too short for a magic and a version"));
  }
  if (bytes.substr(0, 8) != magic) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), ": bad magic (want \"",
                                                   std::string(magic.substr(0, 7)), "\\0\")"));
  }
  return GetLE(bytes, 8, 4);
}

// The opening of a format with one version and a fixed header: ReadVersion, then the version
// must be `version` and `bytes` must hold `header_size` bytes. Errors as ReadVersion, and
// kInvalidArgument "<what>: version is N, this build reads version V", kOutOfRange
// "<what>: truncated: N bytes, the header alone is H".
inline absl::Status ReadHeader(std::string_view bytes, std::string_view magic,
                               std::string_view what, uint64_t version, size_t header_size) {
  absl::StatusOr<uint64_t> got = ReadVersion(bytes, magic, what);
  if (!got.ok()) return got.status();
  if (*got != version) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), ": version is ", *got,
                                                   ", this build reads version ", version));
  }
  if (bytes.size() < header_size) {
    return absl::OutOfRangeError(absl::StrCat(std::string(what), ": truncated: ", bytes.size(),
                                              " bytes, the header alone is ", header_size));
  }
  return absl::OkStatus();
}

}  // namespace modelfs::index_fields
