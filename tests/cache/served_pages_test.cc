// The served-page dropper: which chunks' pages leave the page cache once served, on a
// CacheLayer of its own (no data file: the fadvise calls are not made here).
#include "core/cache/served_pages.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>

#include "core/cache/cache_layer.h"
#include "core/cache/layer_table.h"
#include "core/cache/verifier.h"
#include "tests/cache/test_layer.h"

namespace modelfs {
namespace {

TEST(ServedPagesTest, AChunkCountsAsServedOnlyOnceEveryByteOfItWasSent) {
  LayerTable table;
  TableLock lock(table);
  auto layer = MakeTestLayer(table, 8, ChunkState::kVerified);
  LayerGuard held(*layer, Held(table));
  EXPECT_EQ(CountServed(*layer, 0, kMiB + kMiB / 2), std::vector<uint64_t>{0});
  EXPECT_EQ(CountServed(*layer, kMiB + kMiB / 2, 2 * kMiB), std::vector<uint64_t>{1});
}

TEST(ServedPagesTest, AServedChunkThatIsNotFlushedIsNotTaken) {
  LayerTable table;
  TableLock lock(table);
  auto layer = MakeTestLayer(table, 8, ChunkState::kVerified);
  LayerGuard held(*layer, Held(table));
  layer->durable[0] = false;
  EXPECT_TRUE(CountServed(*layer, 0, kMiB).empty());
}

TEST(ServedPagesTest, AdjacentServedChunksAreDroppedAsOneRangeAndCounted) {
  LayerTable table;
  TableLock lock(table);
  auto layer = MakeTestLayer(table, 8, ChunkState::kVerified);
  LayerGuard held(*layer, Held(table));
  std::atomic<uint64_t> dropped{0};
  CountServed(*layer, 0, 2 * kMiB);
  EXPECT_EQ(TakeServedDrops(*layer, {0, 1}, /*drop_served_pages=*/true, dropped),
            (PageRanges{{0, 2 * kMiB}}));
  EXPECT_EQ(dropped.load(), 2 * kMiB);
  EXPECT_EQ(layer->served[0], 0u);  // counted as unserved again
}

TEST(ServedPagesTest, ADropReachesBackOverTheChunksDroppedBeforeIt) {
  LayerTable table;
  TableLock lock(table);
  auto layer = MakeTestLayer(table, 8, ChunkState::kVerified);
  LayerGuard held(*layer, Held(table));
  std::atomic<uint64_t> dropped{0};
  CountServed(*layer, 0, 2 * kMiB);
  TakeServedDrops(*layer, {0, 1}, /*drop_served_pages=*/true, dropped);
  CountServed(*layer, 2 * kMiB, 3 * kMiB);
  // Folios may span chunks: the range widens over dropped chunks, up to kPageDropReach.
  static_assert(kPageDropReach >= 3 * kMiB);
  EXPECT_EQ(TakeServedDrops(*layer, {2}, /*drop_served_pages=*/true, dropped),
            (PageRanges{{0, 3 * kMiB}}));
  EXPECT_EQ(dropped.load(), 3 * kMiB);
}

TEST(ServedPagesTest, WithoutDropServedPagesChunksAreOnlyMarkedFlushed) {
  LayerTable table;
  TableLock lock(table);
  auto layer = MakeTestLayer(table, 8, ChunkState::kVerified);
  LayerGuard held(*layer, Held(table));
  std::atomic<uint64_t> dropped{0};
  layer->durable[3] = false;
  CountServed(*layer, 3 * kMiB, 4 * kMiB);
  EXPECT_TRUE(TakeServedDrops(*layer, {3}, /*drop_served_pages=*/false, dropped).empty());
  EXPECT_TRUE(layer->durable[3]);
  EXPECT_EQ(dropped.load(), 0u);
}

}  // namespace
}  // namespace modelfs
