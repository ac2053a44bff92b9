// LayerTable: the locked operations on the cache's table of layers, on layers of its own (no
// cache, no data files).
#include "core/cache/layer_table.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>

#include "tests/cache/test_layer.h"

namespace modelfs {
namespace {

std::shared_ptr<CacheLayer> NewLayer(const LayerTable& table, const std::string& name,
                                     uint64_t chunks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(table.mu()) {
  auto layer = table.NewLayer(Digest::Of(name), chunks * kMiB, kMiB, /*fd=*/-1);
  LayerGuard held(*layer, Held(table));
  layer->ResetChunks(ChunkState::kMissing);
  return layer;
}

TEST(LayerTableTest, ALayerPutIsFoundByItsDigestAndIsCurrentUntilReplaced) {
  LayerTable table;
  TableLock lock(table);
  auto first = NewLayer(table, "a", 2);
  EXPECT_EQ(table.Find(first->digest), nullptr);
  table.Put(first);
  EXPECT_EQ(table.Find(first->digest), first);
  EXPECT_TRUE(table.IsCurrent(*first));
  auto second = NewLayer(table, "a", 2);
  table.Put(second);
  EXPECT_EQ(table.Find(first->digest), second);
  EXPECT_FALSE(table.IsCurrent(*first));
}

TEST(LayerTableTest, OnlyALayerRegisteredAndReferencedIsFoundRegistered) {
  LayerTable table;
  TableLock lock(table);
  auto layer = NewLayer(table, "a", 1);
  table.Put(layer);
  EXPECT_EQ(table.FindRegistered(layer->digest), nullptr);  // known from the journal only
  LayerGuard held(*layer, Held(table));
  layer->has_spec = true;
  EXPECT_EQ(table.FindRegistered(layer->digest), nullptr);  // no model references it
  layer->refs.insert("m1");
  EXPECT_EQ(table.FindRegistered(layer->digest), layer);
}

TEST(LayerTableTest, TheBytesOfEachLayerAddUpToTheTablesAndLeaveWithAnUnlinkedLayer) {
  LayerTable table;
  TableLock lock(table);
  auto a = NewLayer(table, "a", 4);
  auto b = NewLayer(table, "b", 4);
  table.Put(a);
  table.Put(b);
  LayerGuard held_a(*a, Held(table));
  LayerGuard held_b(*b, Held(table));
  table.AddLayerBytes(*a, 3 * kMiB);
  table.AddLayerBytes(*b, 2 * kMiB);
  table.RemoveLayerBytes(*a, kMiB);
  EXPECT_EQ(a->cached_bytes, 2 * kMiB);
  EXPECT_EQ(table.cached_bytes(), 4 * kMiB);
  const uint64_t gen = a->gen.load();
  EXPECT_EQ(table.Unlink(*a), 2 * kMiB);  // the layer keeps its count; the table's drops it
  EXPECT_EQ(a->gen.load(), gen + 1);      // its flights and journal writes are stale
  EXPECT_EQ(table.cached_bytes(), 2 * kMiB);
  EXPECT_EQ(table.Find(a->digest), nullptr);
  EXPECT_EQ(table.Layers().size(), 1u);
}

TEST(LayerTableTest, LayersListsEveryLayerInTheTable) {
  LayerTable table;
  TableLock lock(table);
  for (const char* name : {"a", "b", "c"}) table.Put(NewLayer(table, name, 1));
  std::set<Digest> seen;
  for (const std::shared_ptr<CacheLayer>& layer : table.Layers()) seen.insert(layer->digest);
  EXPECT_EQ(seen, (std::set<Digest>{Digest::Of("a"), Digest::Of("b"), Digest::Of("c")}));
}

TEST(LayerTableTest, TheClockStampsInOrderFromTheLatestStampSeen) {
  LayerTable table;
  TableLock lock(table);
  table.SeenStamp(41);
  table.SeenStamp(7);  // an older row does not move the clock back
  EXPECT_EQ(table.Stamp(), 42);
  EXPECT_EQ(table.Stamp(), 43);
}

TEST(LayerTableTest, TheTableIsIdleOnlyOnceNoReadIsInProgressAndTheIdleTimePassed) {
  LayerTable table;
  TableLock lock(table);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  table.ReadBegins(t0);
  EXPECT_EQ(table.IdleAt(absl::Seconds(1)), absl::InfiniteFuture());
  table.ReadEnds(t0 + absl::Seconds(5));
  EXPECT_EQ(table.reads_in_progress(), 0);
  EXPECT_EQ(table.IdleAt(absl::Seconds(1)), t0 + absl::Seconds(6));
  EXPECT_FALSE(table.closing());
  table.Close();
  EXPECT_TRUE(table.closing());
}

}  // namespace
}  // namespace modelfs
