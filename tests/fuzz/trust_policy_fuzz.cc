// Fuzzes TrustPolicy::Parse: whatever the bytes, a Status (never an abort), and an accepted
// policy answers ScopeFor with requirements. Inputs naming key files are skipped: reading
// arbitrary paths (a FIFO, /dev/stdin) is not the parser under test; keyData PEM is fuzzed.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/trust/policy.h"

using namespace modelfs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (bytes.find("keyPath") != std::string_view::npos) return 0;
  auto p = TrustPolicy::Parse(bytes, "fuzz.json");
  if (!p.ok()) return 0;
  static const ImageReference ref = *ImageReference::Parse("reg.example.com:5000/team/m:v1");
  PolicyScope scope = p->ScopeFor(ref);
  if (scope.requirements == nullptr || scope.requirements->empty()) abort();
  return 0;
}
