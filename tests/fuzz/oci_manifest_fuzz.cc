// Fuzzes the JSON parsers of core/oci: whatever the bytes, parsing returns a Status (never
// aborts), and an accepted document re-serializes to a fixed point.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/oci/manifest.h"
#include "core/oci/modelpack.h"
#include "core/oci/volume_image.h"

using namespace modelfs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (auto m = ParseManifest(bytes); m.ok()) {
    const std::string once = SerializeManifest(*m);
    auto again = ParseManifest(once);
    if (!again.ok() || SerializeManifest(*again) != once) abort();
    (void)ResolveModelLayers(*m);
    (void)IsVolumeImageManifest(*m);
  }
  if (auto index = ParseIndex(bytes); index.ok()) {
    const std::string once = SerializeIndex(*index);
    auto again = ParseIndex(once);
    if (!again.ok() || SerializeIndex(*again) != once) abort();
  }
  if (auto c = ParseModelPackConfig(bytes); c.ok()) {
    auto again = ParseModelPackConfig(SerializeModelPackConfig(*c));
    if (!again.ok() || !(*again == *c)) abort();
  }
  if (auto info = ParseVolumeModelJson(bytes); info.ok()) {
    auto again = ParseVolumeModelJson(SerializeVolumeModelJson(*info));
    if (!again.ok() || !(*again == *info)) abort();
  }
  (void)ParseFileMetadata(bytes);
  return 0;
}
