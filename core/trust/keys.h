// Signing keys: ECDSA P-256 public keys to verify with and private keys to sign with, as
// cosign and skopeo use them. Only P-256 with SHA-256 is accepted; any other key type (RSA,
// P-384, Ed25519...) is refused by name when loaded, so a policy cannot hold a key that
// verification would treat differently from skopeo's build of sigstore.
//
// Private keys come as:
//  - PEM "PRIVATE KEY" (PKCS#8) or "EC PRIVATE KEY" (SEC1), unencrypted;
//  - cosign's encrypted format, PEM "ENCRYPTED SIGSTORE PRIVATE KEY" or "ENCRYPTED COSIGN
//    PRIVATE KEY": JSON {kdf: scrypt(N, r, p, salt), cipher: nacl/secretbox(nonce), ciphertext}
//    around PKCS#8 DER. The passphrase is read by the caller from COSIGN_PASSWORD (never a flag).
// Scrypt is OpenSSL's, secretbox is libsodium's; the KDF parameters are bounded (N <= 2^20,
// r*p small) so a hostile key file cannot ask for gigabytes.
//
// Thread safety: PublicKey and PrivateKey are immutable after loading; const methods may be
// called concurrently.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

typedef struct evp_pkey_st EVP_PKEY;

namespace modelfs {

namespace trust_internal {
struct PkeyDeleter {
  void operator()(EVP_PKEY* key) const;
};
}  // namespace trust_internal

class PublicKey {
 public:
  // Parses a PEM "PUBLIC KEY" (SubjectPublicKeyInfo). `source` names where it came from
  // ("/etc/keys/team.pub", "keyData") and is used in messages and as name().
  // Errors: kInvalidArgument (not PEM, not a public key, not EC P-256: names source and type).
  static absl::StatusOr<PublicKey> FromPem(std::string_view pem, std::string_view source);
  // Reads and parses `path` (at most 64 KiB). Errors: as FromPem, kNotFound for a missing file.
  static absl::StatusOr<PublicKey> FromFile(const std::string& path);

  // OK when `der_signature` (ASN.1 DER ECDSA, as cosign writes it) is a valid signature over
  // SHA-256(`payload`). Errors: kPermissionDenied (does not verify), kInvalidArgument
  // (malformed DER).
  absl::Status Verify(std::string_view payload, std::string_view der_signature) const;

  // Where the key came from (the file path, or "keyData" with an index).
  const std::string& name() const { return name_; }
  // "sha256:<hex>" of the DER SubjectPublicKeyInfo: a stable name for output and logs.
  const std::string& fingerprint() const { return fingerprint_; }
  // The PEM "PUBLIC KEY" form.
  std::string Pem() const;

 private:
  friend class PrivateKey;
  PublicKey() = default;
  std::shared_ptr<EVP_PKEY> key_;
  std::string name_;
  std::string fingerprint_;
};

class PrivateKey {
 public:
  // Parses a plain PEM private key or a cosign encrypted one (see above); `passphrase` is used
  // only by the encrypted form (empty is a valid cosign passphrase). `source` names the file in
  // messages. Errors: kInvalidArgument (format, key type, unsupported kdf/cipher, KDF
  // parameters over the bounds), kPermissionDenied (wrong passphrase: secretbox refused).
  static absl::StatusOr<PrivateKey> FromPem(std::string_view pem, std::string_view source,
                                            std::string_view passphrase);
  // Reads `path` (at most 64 KiB). An encrypted key is opened with COSIGN_PASSWORD, as cosign
  // does; with the variable unset, the empty passphrase is tried and a failure says to set it.
  static absl::StatusOr<PrivateKey> FromFile(const std::string& path);

  // ASN.1 DER ECDSA signature over SHA-256(`payload`).
  absl::StatusOr<std::string> Sign(std::string_view payload) const;
  // The matching public key (name(): the private key's source).
  const PublicKey& public_key() const { return *public_key_; }

 private:
  PrivateKey() = default;
  std::shared_ptr<EVP_PKEY> key_;
  std::shared_ptr<PublicKey> public_key_;
};

// True when `pem` starts (after whitespace) with a cosign encrypted private key header.
bool IsCosignEncryptedKey(std::string_view pem);

}  // namespace modelfs
