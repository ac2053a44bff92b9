// Fuzzes ParseSimpleSigningPayload: whatever the bytes, a Status (never an abort); an accepted
// payload rebuilt from its fields parses to the same fields.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/trust/simple_signing.h"

using namespace modelfs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto p = ParseSimpleSigningPayload(bytes);
  if (!p.ok()) return 0;
  auto again = ParseSimpleSigningPayload(
      BuildSimpleSigningPayload(p->docker_reference, p->manifest_digest, p->creator));
  if (!again.ok() || again->docker_reference != p->docker_reference ||
      again->manifest_digest != p->manifest_digest || again->creator != p->creator) {
    abort();
  }
  return 0;
}
