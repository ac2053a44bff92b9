// Stub: filled in by the next commit.
#include "core/trust/sign.h"

namespace modelfs {
std::string SigningIdentity(const ImageReference&) { return ""; }
absl::StatusOr<SignResult> SignImage(RegistrySignatureStore&, const ImageReference&, const Digest&,
                                     const PrivateKey&) {
  return absl::UnimplementedError("not yet");
}
}  // namespace modelfs
