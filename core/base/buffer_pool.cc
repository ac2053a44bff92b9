#include "core/base/buffer_pool.h"

#include <algorithm>

namespace modelfs {

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
  b.capacity_ = std::max(size, min_size_);
  // Not value-initialised: whoever asked writes the bytes before reading them.
  b.bytes_.reset(new char[b.capacity_]);
  return b;
}

void BufferPool::Put(std::unique_ptr<char[]> bytes, size_t capacity) {
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
