// Stub: filled in by the next commit.
#include "core/trust/keys.h"

#include <openssl/evp.h>

namespace modelfs {
void trust_internal::PkeyDeleter::operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
absl::StatusOr<PublicKey> PublicKey::FromPem(std::string_view, std::string_view) {
  return absl::UnimplementedError("not yet");
}
absl::StatusOr<PublicKey> PublicKey::FromFile(const std::string&) {
  return absl::UnimplementedError("not yet");
}
absl::Status PublicKey::Verify(std::string_view, std::string_view) const {
  return absl::UnimplementedError("not yet");
}
std::string PublicKey::Pem() const { return ""; }
absl::StatusOr<PrivateKey> PrivateKey::FromPem(std::string_view, std::string_view,
                                               std::string_view) {
  return absl::UnimplementedError("not yet");
}
absl::StatusOr<PrivateKey> PrivateKey::FromFile(const std::string&) {
  return absl::UnimplementedError("not yet");
}
absl::StatusOr<std::string> PrivateKey::Sign(std::string_view) const {
  return absl::UnimplementedError("not yet");
}
bool IsCosignEncryptedKey(std::string_view) { return false; }
}  // namespace modelfs
