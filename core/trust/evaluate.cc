// Stub: filled in by the next commit.
#include "core/trust/evaluate.h"

namespace modelfs {
std::string_view ReasonName(TrustReason) { return ""; }
TrustVerdict Evaluate(const TrustPolicy&, const ImageReference&, const Digest&, SignatureStore&) {
  return {};
}
TrustVerdict EvaluateRequirements(const std::vector<PolicyRequirement>&, std::string_view,
                                  const ImageReference&, const Digest&, SignatureStore&) {
  return {};
}
bool IdentityMatches(IdentityMatch, const ImageReference&, std::string_view) { return false; }
absl::Status VerdictStatus(const TrustVerdict&, const ImageReference&, const Digest&,
                           std::string_view) {
  return absl::UnimplementedError("not yet");
}
}  // namespace modelfs
