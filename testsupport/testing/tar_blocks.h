// Test fixtures for hand-edited tar headers: after a test changes a field of a header block,
// FixTarChecksum writes the block's checksum again, as a tar writer would have.
#pragma once

#include <cstdio>
#include <cstring>
#include <string>

namespace modelfs::testing {

// Rewrites the checksum of the header block at `off` of `tar`.
inline void FixTarChecksum(std::string& tar, size_t off) {
  std::memset(&tar[off + 148], ' ', 8);
  unsigned sum = 0;
  for (size_t i = 0; i < 512; ++i) sum += static_cast<unsigned char>(tar[off + i]);
  char buf[8];
  std::snprintf(buf, sizeof buf, "%06o", sum);
  std::memcpy(&tar[off + 148], buf, 7);
}

}  // namespace modelfs::testing
