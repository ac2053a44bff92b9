// Stub: filled in by the next commit.
#include "core/trust/signature_store.h"

namespace modelfs {
std::string SignatureTag(const Digest& d) { return "sha256-" + std::string(d.hex()) + ".sig"; }
absl::StatusOr<SignatureSet> RegistrySignatureStore::Fetch(const std::string&, const Digest&) {
  (void)client_;
  return absl::UnimplementedError("not yet");
}
absl::StatusOr<AppendResult> RegistrySignatureStore::Append(const std::string&, const Digest&,
                                                            const std::string&,
                                                            const std::string&) {
  return absl::UnimplementedError("not yet");
}
}  // namespace modelfs
