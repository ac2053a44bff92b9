#include "core/base/buffer_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <new>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older headers lack it
#endif

namespace modelfs {

namespace {

size_t PageRound(size_t n) {
  return (n + BufferPool::kPageSize - 1) / BufferPool::kPageSize * BufferPool::kPageSize;
}

}  // namespace

void BufferPool::Unmap::operator()(char* p) const { munmap(p, size); }

BufferPool::Buffer& BufferPool::Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = other.pool_;
    bytes_ = std::move(other.bytes_);
    capacity_ = other.capacity_;
    other.pool_ = nullptr;
    other.capacity_ = 0;
  }
  return *this;
}

void BufferPool::Buffer::Release() {
  if (pool_ != nullptr && bytes_) pool_->Put(std::move(bytes_), capacity_);
  pool_ = nullptr;
  bytes_.reset();
  capacity_ = 0;
}

BufferPool::Buffer BufferPool::Get(size_t size) {
  Buffer b;
  b.pool_ = this;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = idle_.begin(); it != idle_.end(); ++it) {
      if (it->second >= size) {
        b.bytes_ = std::move(it->first);
        b.capacity_ = it->second;
        idle_.erase(it);
        return b;
      }
    }
  }
  const size_t capacity = PageRound(std::max({size, min_size_, size_t{1}}));
  void* p = mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  // The bytes asked for are populated now, in one call, rather than one fault per page on first
  // touch (see the header); the rest of a larger capacity faults in if a later user needs it.
  // A kernel without MADV_POPULATE_WRITE (before 5.14) says EINVAL: its pages fault as before.
  // Not cleared by us: whoever asked writes the bytes before reading them.
  madvise(p, PageRound(std::max<size_t>(size, 1)), MADV_POPULATE_WRITE);
  b.bytes_ = Bytes(static_cast<char*>(p), Unmap{capacity});
  b.capacity_ = capacity;
  return b;
}

size_t BufferPool::idle() const {
  absl::MutexLock lock(&mu_);
  return idle_.size();
}

void BufferPool::Put(Bytes bytes, size_t capacity) {
  absl::MutexLock lock(&mu_);
  // Only buffers of the usual size are kept: an odd large one is given back to the system.
  if (idle_.size() >= max_idle_ || capacity > 4 * min_size_) return;
  idle_.emplace_back(std::move(bytes), capacity);
}

BufferPool& BufferPool::Shared() {
  static BufferPool* pool = new BufferPool(1 << 20, 32);
  return *pool;
}

}  // namespace modelfs
