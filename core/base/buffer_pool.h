// BufferPool: reusable byte buffers of about a megabyte for the read path.
//
// Each fetched chunk and each FUSE reply that is read from the cache needs a buffer of the
// chunk or request size. Allocated fresh, each one is a new mapping (see heap.h: large blocks
// are mapped so that they go back to the system), and every page of it faults on first touch:
// a tenth of the mount's CPU on a cold load. The pool keeps a bounded number of freed buffers
// for the next user, so memory stays flat and the faults are paid once.
//
// Thread safety: safe for concurrent use.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace modelfs {

class BufferPool {
 public:
  // A buffer of at least the size asked for; goes back to its pool when destroyed.
  class Buffer {
   public:
    Buffer() = default;
    Buffer(Buffer&& other) noexcept { *this = std::move(other); }
    Buffer& operator=(Buffer&& other) noexcept;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    ~Buffer() { Release(); }

    char* data() { return bytes_.get(); }
    size_t capacity() const { return capacity_; }

   private:
    friend class BufferPool;
    void Release();
    BufferPool* pool_ = nullptr;
    std::unique_ptr<char[]> bytes_;
    size_t capacity_ = 0;
  };

  // Keeps at most `max_idle` freed buffers; a buffer is never smaller than `min_size`, so
  // requests of different sizes up to it share buffers.
  BufferPool(size_t min_size, size_t max_idle) : min_size_(min_size), max_idle_(max_idle) {}
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  Buffer Get(size_t size);

  // The pool the read path shares: 1 MiB buffers (a chunk, a FUSE request), 32 kept.
  static BufferPool& Shared();

 private:
  void Put(std::unique_ptr<char[]> bytes, size_t capacity);

  const size_t min_size_;
  const size_t max_idle_;
  absl::Mutex mu_;
  std::vector<std::pair<std::unique_ptr<char[]>, size_t>> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace modelfs
