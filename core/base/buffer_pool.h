// BufferPool: reusable byte buffers of about a megabyte for the read path.
//
// Each fetched chunk and each FUSE reply that is read from the cache needs a buffer of the
// chunk or request size. Allocated fresh, each one is a new mapping (see heap.h: large blocks
// are mapped so that they go back to the system), and every page of it faults on first touch:
// a tenth of the mount's CPU on a cold load. The pool keeps a bounded number of freed buffers
// for the next user, so memory stays flat and the faults are paid once.
//
// A new buffer is its own page-aligned mapping (its capacity a whole number of pages), and the
// bytes asked for are populated when it is made (MADV_POPULATE_WRITE): one system call puts the
// pages in, where first touch took one page-fault exception per 4 KiB. On this VM an exception
// is dear: a cold load's first buffers took about 1,500 of them.
//
// Thread safety: safe for concurrent use.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace modelfs {

class BufferPool {
  // Unmaps a buffer's mapping of `size` bytes.
  struct Unmap {
    size_t size;  // value-initialised (0) by an empty unique_ptr
    void operator()(char* p) const;
  };
  using Bytes = std::unique_ptr<char[], Unmap>;

 public:
  static constexpr size_t kPageSize = 4096;

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
    const char* data() const { return bytes_.get(); }
    size_t capacity() const { return capacity_; }

   private:
    friend class BufferPool;
    void Release();
    BufferPool* pool_ = nullptr;
    Bytes bytes_;
    size_t capacity_ = 0;
  };

  // Keeps at most `max_idle` freed buffers; a buffer is never smaller than `min_size`, so
  // requests of different sizes up to it share buffers.
  BufferPool(size_t min_size, size_t max_idle) : min_size_(min_size), max_idle_(max_idle) {}
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // An idle buffer of at least `size` bytes, or a new one (std::bad_alloc when none can be
  // mapped).
  Buffer Get(size_t size);

  // Freed buffers the pool holds now.
  size_t idle() const;

  // The pool the read path shares: 1 MiB buffers (a chunk, a FUSE request), 32 kept.
  static BufferPool& Shared();

 private:
  void Put(Bytes bytes, size_t capacity);

  const size_t min_size_;
  const size_t max_idle_;
  mutable absl::Mutex mu_;
  std::vector<std::pair<Bytes, size_t>> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace modelfs
