// Stub: filled in by the next commit.
#include "core/trust/policy.h"

namespace modelfs {
std::string_view IdentityMatchName(IdentityMatch) { return ""; }
std::string_view RequirementTypeName(PolicyRequirement::Type) { return ""; }
absl::StatusOr<TrustPolicy> TrustPolicy::Parse(std::string_view, std::string_view) {
  return absl::UnimplementedError("not yet");
}
absl::StatusOr<TrustPolicy> TrustPolicy::LoadFile(const std::string&) {
  return absl::UnimplementedError("not yet");
}
PolicyScope TrustPolicy::ScopeFor(const ImageReference&) const { return {"default", &default_}; }
PolicyStamp StampFiles(const std::vector<std::string>&) { return {}; }
}  // namespace modelfs
