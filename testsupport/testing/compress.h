// Test fixtures for compressed layers: gzip members (zlib) and zstd streams of independent
// frames (libzstd), as the gzip and zstd tools and `modelfs push --compress zstd` write them.
// Tests that include this link ZLIB::ZLIB and PkgConfig::ZSTD.
#pragma once

#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

namespace modelfs::testing {

// One gzip member at level 6; `name` sets the header's FNAME field, as `gzip FILE` writes it.
inline std::string Gzip(const std::string& data, const char* name = nullptr) {
  z_stream zs{};
  if (deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) abort();
  gz_header header{};
  if (name != nullptr) {
    header.name = reinterpret_cast<Bytef*>(const_cast<char*>(name));
    if (deflateSetHeader(&zs, &header) != Z_OK) abort();
  }
  std::string out(deflateBound(&zs, data.size()) + 64 + (name ? strlen(name) : 0), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  if (deflate(&zs, Z_FINISH) != Z_STREAM_END) abort();
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// One zstd frame (level 3, with a content checksum) per `piece` bytes of `data`.
inline std::string ZstdFrames(const std::string& data, size_t piece) {
  std::string out;
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 3);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  for (size_t off = 0; off < data.size() || (off == 0 && data.empty()); off += piece) {
    const size_t n = std::min(piece, data.size() - off);
    std::string frame(ZSTD_compressBound(n), '\0');
    const size_t r = ZSTD_compress2(cctx, frame.data(), frame.size(), data.data() + off, n);
    if (ZSTD_isError(r)) abort();
    frame.resize(r);
    out += frame;
    if (data.empty()) break;
  }
  ZSTD_freeCCtx(cctx);
  return out;
}

}  // namespace modelfs::testing
