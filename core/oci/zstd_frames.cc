#include "core/oci/zstd_frames.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <zstd.h>

#include <memory>

#include "absl/strings/str_cat.h"

namespace modelfs {

absl::StatusOr<ZstdFramesResult> WriteZstdFrames(const std::string& in_path,
                                                 const std::string& out_path, uint64_t frame_bytes,
                                                 int level) {
  if (frame_bytes == 0) return absl::InvalidArgumentError("zstd frames: frame size is 0");
  std::unique_ptr<FILE, int (*)(FILE*)> in(fopen(in_path.c_str(), "rb"), &fclose);
  if (!in) return absl::NotFoundError(absl::StrCat(in_path, ": ", strerror(errno)));
  std::unique_ptr<FILE, int (*)(FILE*)> out(fopen(out_path.c_str(), "wb"), &fclose);
  if (!out) return absl::InternalError(absl::StrCat(out_path, ": ", strerror(errno)));
  std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> cctx(ZSTD_createCCtx(), &ZSTD_freeCCtx);
  if (!cctx) return absl::InternalError("zstd frames: cannot allocate a context");
  ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, level);
  ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_checksumFlag, 1);
  ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_contentSizeFlag, 1);
  std::string piece(frame_bytes, '\0');
  std::string frame(ZSTD_compressBound(frame_bytes), '\0');
  Sha256 compressed_hash, input_hash;
  ZstdFramesResult r;
  while (true) {
    const size_t n = fread(piece.data(), 1, piece.size(), in.get());
    if (n < piece.size() && ferror(in.get())) {
      return absl::InternalError(absl::StrCat(in_path, ": read failed"));
    }
    if (n == 0 && r.frames > 0) break;
    // Each frame is compressed on its own (no shared window): any frame can be decoded alone.
    const size_t z = ZSTD_compress2(cctx.get(), frame.data(), frame.size(), piece.data(), n);
    if (ZSTD_isError(z)) {
      return absl::InternalError(absl::StrCat(in_path, ": zstd at input offset ", r.input_size,
                                              ": ", ZSTD_getErrorName(z)));
    }
    if (fwrite(frame.data(), 1, z, out.get()) != z) {
      return absl::InternalError(absl::StrCat(out_path, ": write: ", strerror(errno)));
    }
    input_hash.Update(piece.data(), n);
    compressed_hash.Update(frame.data(), z);
    r.input_size += n;
    r.size += z;
    r.frames++;
    if (n < piece.size()) break;
  }
  if (fclose(out.release()) != 0) {
    return absl::InternalError(absl::StrCat(out_path, ": write failed"));
  }
  r.digest = compressed_hash.Finish();
  r.diff_id = input_hash.Finish();
  return r;
}

}  // namespace modelfs
