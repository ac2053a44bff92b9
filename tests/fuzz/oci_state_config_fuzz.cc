// Fuzzes the state artifact parsers (core/oci/state_artifact.h): whatever the bytes,
// ParseStateConfig returns a Status (never aborts); an accepted config re-serializes to a
// fixed point and builds a state manifest whose subject it matches.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/oci/manifest.h"
#include "core/oci/state_artifact.h"

using namespace modelfs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto c = ParseStateConfig(bytes);
  if (!c.ok()) return 0;
  const std::string once = SerializeStateConfig(*c);
  auto again = ParseStateConfig(once);
  if (!again.ok() || !(*again == *c) || SerializeStateConfig(*again) != once) abort();
  auto s = BuildStateManifest(once, c->model, {{"state.bin", Digest::Of("x"), 1}});
  if (!s.ok() || !IsStateManifest(*s) || !CheckStateMatchesSubject(*s, *c).ok()) abort();
  return 0;
}
