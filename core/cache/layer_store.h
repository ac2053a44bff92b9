// LayerStore: the cache's data files, one sparse file per layer under
// <dir>/blobs/sha256/<hex>.data (docs/cache-format.md). It moves bytes and names files; it
// decides nothing about which bytes are good (the verifier and the journal do).
//
// Thread safety: const after construction; its methods are safe to call concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/oci/digest.h"

namespace modelfs {

class LayerStore {
 public:
  // Writes `n` bytes at `offset` of a data file; 0 or an errno (ENOSPC, EDQUOT: disk full).
  using WriteFn = std::function<int(int fd, const char* data, uint64_t n, uint64_t offset)>;

  // `write` replaces pwrite (a test seam for a failing disk); null: pwrite.
  LayerStore(std::string dir, WriteFn write);

  // Creates <dir>/blobs/sha256. Errors: kInternal naming the directory.
  absl::Status Init() const;

  std::string PathOf(const Digest& digest) const;
  // The layer's file, created (or emptied when `truncate`) and sized to `size`, read-write.
  // Errors: kInternal naming the file.
  absl::StatusOr<int> Create(const Digest& digest, uint64_t size, bool truncate) const;
  // The existing file read-write, or -1.
  int OpenExisting(const Digest& digest) const;
  // A new read-only open file description of it, or -1: whoever holds it cannot write.
  int OpenReadOnly(const Digest& digest) const;
  // Writes all `n` bytes; 0 or an errno.
  int Write(int fd, const char* data, uint64_t n, uint64_t offset) const;
  // Copies `n` bytes of `in` at `in_offset` to `out` at `out_offset` in the kernel
  // (copy_file_range), through Write where it cannot (or a test hooks writes); 0 or an errno
  // (EIO when `in` ends first).
  int Copy(int in, uint64_t in_offset, int out, uint64_t out_offset, uint64_t n) const;
  // Reads exactly `n` bytes. Errors: kInternal naming the file and offset (I/O error, or the
  // file ends first).
  absl::Status ReadFull(int fd, const Digest& digest, char* buf, uint64_t n, uint64_t offset) const;
  // Flushes the file's data to disk. Errors: kInternal naming the file.
  absl::Status Sync(int fd, const Digest& digest) const;
  // Removes the layer's data file and its member files.
  void Remove(const Digest& digest) const;
  // Removes every data file and member directory whose name (<hex>.data, <hex>.members) is
  // not in `keep`: leftovers the journal does not vouch for.
  void RemoveAllExcept(const absl::flat_hash_set<std::string>& keep) const;
  static std::string FileNameOf(const Digest& digest);

  // Member files (layer_segments.h): <dir>/blobs/sha256/<hex>.members/<layer offset>.
  static std::string MemberDirNameOf(const Digest& digest);
  std::string MemberPathOf(const Digest& digest, uint64_t offset) const;
  // The member file at `offset`, created empty (truncated) with `length` bytes, read-write.
  // Errors: kInternal naming the file (kResourceExhausted when the disk is full).
  absl::StatusOr<int> CreateMember(const Digest& digest, uint64_t offset, uint64_t length) const;
  // Removes the layer's member files only.
  void RemoveMembers(const Digest& digest) const;
  // The existing member file, read-only or read-write; -1 when it cannot be opened.
  int OpenMember(const Digest& digest, uint64_t offset, bool read_only) const;

  // What a data file looks like once its whole layer was verified and flushed: device, inode,
  // size, and change and modification times to the nanosecond. Any write to the file
  // afterwards (or a replacement of it) changes the ctime, so a matching seal says the bytes
  // are still the verified ones. "" when fstat fails.
  static std::string SealOf(int fd);

 private:
  const std::string dir_;
  const WriteFn write_;
};

}  // namespace modelfs
