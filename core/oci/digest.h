// Content digests ("sha256:<64 hex>") and a streaming SHA-256 (OpenSSL EVP).
//
// Thread safety: Sha256 is a value; one instance per thread.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace modelfs {

// A validated OCI digest. Only sha256 is supported (the algorithm registries and the Hugging
// Face LFS store agree on).
class Digest {
 public:
  Digest() = default;
  // Parses "sha256:<64 lowercase hex>". Errors: kInvalidArgument naming the bad string.
  static absl::StatusOr<Digest> Parse(std::string_view s);
  static Digest FromRaw(const std::array<uint8_t, 32>& raw);
  // SHA-256 of bytes.
  static Digest Of(std::string_view bytes);

  const std::string& str() const { return str_; }  // "sha256:abc..."
  std::string_view hex() const { return std::string_view(str_).substr(7); }
  std::string_view short_hex() const { return hex().substr(0, 12); }
  bool empty() const { return str_.empty(); }
  std::array<uint8_t, 32> raw() const;

  friend bool operator==(const Digest& a, const Digest& b) { return a.str_ == b.str_; }
  friend bool operator!=(const Digest& a, const Digest& b) { return a.str_ != b.str_; }
  friend bool operator<(const Digest& a, const Digest& b) { return a.str_ < b.str_; }
  template <typename H>
  friend H AbslHashValue(H h, const Digest& d) {
    return H::combine(std::move(h), d.str_);
  }

 private:
  std::string str_;
};

// Streaming SHA-256.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;

  void Update(std::string_view bytes);
  void Update(const void* data, size_t n);
  // Finishes the hash; the object must not be updated afterwards.
  Digest Finish();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

// Hashes a whole file with large reads. Errors: kNotFound, kInternal (I/O).
absl::StatusOr<Digest> DigestFile(const std::string& path, uint64_t* size_out = nullptr);

}  // namespace modelfs
