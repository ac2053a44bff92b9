// Fuzzes the tar header reader and the volume-layer parser (A alone, and A over an index layer):
// never aborts, and every entry it reports has its data inside the blob and (with path checks) a
// canonical relative path.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/oci/path_safety.h"
#include "core/oci/tar.h"
#include "core/oci/volume_image.h"

using namespace modelfs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (bool check : {true, false}) {
    TarReadOptions options;
    options.check_paths = check;
    auto entries = IndexTarBytes(bytes, options);
    if (!entries.ok()) continue;
    for (const TarEntry& e : *entries) {
      if (e.data_offset > size || e.size > size - e.data_offset) abort();
      if (check && !CheckRelativePath(e.path).ok()) abort();
    }
  }
  (void)ParseVolumeLayer(bytes);
  // A over an index layer: the input split at a block boundary (V with index layers).
  const size_t split = (size / 2) / 512 * 512;
  (void)ParseVolumeLayers(bytes.substr(split), {std::string(bytes.substr(0, split))});
  return 0;
}
