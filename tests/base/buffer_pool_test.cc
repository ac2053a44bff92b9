// BufferPool: buffers are reused, the pool stays bounded, every way a buffer is let go of
// returns it, and a new buffer's requested pages are in memory before its first write.
#include "core/base/buffer_pool.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/status.h"

namespace modelfs {
namespace {

constexpr size_t kMiB = 1 << 20;
constexpr size_t kPage = BufferPool::kPageSize;

// Which pages of [p, p + len) are resident (mincore).
std::vector<bool> Resident(const char* p, size_t len) {
  std::vector<unsigned char> vec((len + kPage - 1) / kPage);
  EXPECT_EQ(mincore(const_cast<char*>(p), len, vec.data()), 0) << strerror(errno);
  std::vector<bool> out;
  for (unsigned char v : vec) out.push_back(v & 1);
  return out;
}

TEST(BufferPoolTest, AReleasedBufferIsHandedToTheNextCaller) {
  BufferPool pool(kMiB, 4);
  const char* first;
  {
    BufferPool::Buffer b = pool.Get(kMiB);
    first = b.data();
    EXPECT_EQ(pool.idle(), 0u);
  }
  EXPECT_EQ(pool.idle(), 1u);
  BufferPool::Buffer again = pool.Get(kMiB);
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(again.capacity(), kMiB);
  EXPECT_EQ(pool.idle(), 0u);
}

TEST(BufferPoolTest, ASmallerRequestTakesAnIdleBufferOfTheUsualSize) {
  BufferPool pool(kMiB, 4);
  const char* first;
  {
    BufferPool::Buffer b = pool.Get(kMiB);
    first = b.data();
  }
  BufferPool::Buffer small = pool.Get(100);
  EXPECT_EQ(small.data(), first);
  EXPECT_EQ(small.capacity(), kMiB);
}

TEST(BufferPoolTest, ANewBufferIsPageAlignedAndAWholeNumberOfPages) {
  BufferPool pool(1000, 4);
  BufferPool::Buffer b = pool.Get(5000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kPage, 0u);
  EXPECT_EQ(b.capacity(), 2 * kPage);
  BufferPool::Buffer tiny = pool.Get(0);
  EXPECT_EQ(tiny.capacity(), kPage);  // min_size 1000, one page
}

TEST(BufferPoolTest, TheRequestedPagesAreInMemoryBeforeTheFirstWrite) {
  BufferPool pool(kMiB, 4);
  BufferPool::Buffer b = pool.Get(8 * kPage + 1);  // nine pages asked for, 256 in the buffer
  ASSERT_EQ(b.capacity(), kMiB);
  const std::vector<bool> resident = Resident(b.data(), b.capacity());
  for (size_t i = 0; i < resident.size(); ++i) {
    // The asked-for pages were populated by the pool; the rest wait for a user who needs them.
    EXPECT_EQ(resident[i], i < 9) << "page " << i;
  }
}

TEST(BufferPoolTest, ThePoolKeepsAtMostMaxIdleBuffers) {
  BufferPool pool(kMiB, 2);
  {
    BufferPool::Buffer a = pool.Get(kMiB);
    BufferPool::Buffer b = pool.Get(kMiB);
    BufferPool::Buffer c = pool.Get(kMiB);
  }
  EXPECT_EQ(pool.idle(), 2u);
}

TEST(BufferPoolTest, AnOddLargeBufferIsGivenBackToTheSystem) {
  BufferPool pool(kMiB, 4);
  { BufferPool::Buffer big = pool.Get(5 * kMiB); }
  EXPECT_EQ(pool.idle(), 0u);
  { BufferPool::Buffer four = pool.Get(4 * kMiB); }
  EXPECT_EQ(pool.idle(), 1u);
}

TEST(BufferPoolTest, AMovedBufferGoesBackOnceAndAnOverwrittenOneGoesBackToo) {
  BufferPool pool(kMiB, 4);
  {
    BufferPool::Buffer a = pool.Get(kMiB);
    BufferPool::Buffer b = std::move(a);
    EXPECT_EQ(a.data(), nullptr);
    EXPECT_EQ(a.capacity(), 0u);
    BufferPool::Buffer c = pool.Get(kMiB);
    c = std::move(b);  // c's own buffer goes back now
    EXPECT_EQ(pool.idle(), 1u);
  }
  EXPECT_EQ(pool.idle(), 2u);
}

TEST(BufferPoolTest, ABufferHeldOnAnErrorPathGoesBack) {
  BufferPool pool(kMiB, 4);
  auto fetch = [&]() -> absl::Status {
    BufferPool::Buffer b = pool.Get(kMiB);
    memset(b.data(), 1, kMiB);
    return absl::UnavailableError("the stream ended early");
  };
  EXPECT_EQ(fetch().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(pool.idle(), 1u);
}

}  // namespace
}  // namespace modelfs
