// The git blob id of a file: SHA-1 over "blob <size>\0" followed by the bytes. The Hub names a
// small (non-LFS) file by it, in "blobId" and in the ETag of its resolve answer.
//
// Thread safety: GitBlobHasher is a value; one instance per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace modelfs {

class GitBlobHasher {
 public:
  // `size` is the blob's length, which the header states before the bytes.
  explicit GitBlobHasher(uint64_t size);
  ~GitBlobHasher();
  GitBlobHasher(GitBlobHasher&&) noexcept;
  GitBlobHasher& operator=(GitBlobHasher&&) noexcept;

  void Update(std::string_view bytes);
  // 40 lowercase hex digits. The id is only the file's when exactly `size` bytes were added.
  std::string FinishHex();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

// The git blob id of bytes held in memory.
std::string GitBlobSha1Hex(std::string_view bytes);

}  // namespace modelfs
