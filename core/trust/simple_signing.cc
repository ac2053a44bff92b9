// Stub: filled in by the next commit.
#include "core/trust/simple_signing.h"

namespace modelfs {
std::string BuildSimpleSigningPayload(std::string_view, const Digest&, std::optional<std::string>) {
  return "";
}
absl::StatusOr<SimpleSigningPayload> ParseSimpleSigningPayload(std::string_view) {
  return absl::UnimplementedError("not yet");
}
}  // namespace modelfs
