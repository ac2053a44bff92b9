// The fetch planner: readahead windows, the coalescing of missing chunks, and stream segments,
// on a CacheLayer of its own (no cache, no remote).
#include "core/cache/fetch_planner.h"

#include <gtest/gtest.h>

#include <memory>

#include "core/cache/cache_layer.h"
#include "core/cache/layer_table.h"
#include "tests/cache/test_layer.h"

namespace modelfs {
namespace {

TEST(FetchPlannerTest, ASequentialRunEarnsAWindowOfHalfItOnceReadaheadMinLong) {
  LayerTable table;
  TableLock lock(table);
  auto layer = MakeTestLayer(table, 100, ChunkState::kMissing);
  LayerGuard held(*layer, Held(table));
  const CacheOptions options;  // readahead_min 4 MiB, readahead_max 64 MiB
  UpdateReadahead(*layer, options, 0, 1 * kMiB);
  UpdateReadahead(*layer, options, 1 * kMiB, 2 * kMiB);
  EXPECT_EQ(layer->window, 0u);  // a 2 MiB run is not yet readahead_min long
  UpdateReadahead(*layer, options, 2 * kMiB, 6 * kMiB);
  EXPECT_EQ(layer->window, 4 * kMiB);  // half of 6 MiB, raised to readahead_min
  UpdateReadahead(*layer, options, 6 * kMiB, 30 * kMiB);
  EXPECT_EQ(layer->window, 15 * kMiB);
}

TEST(FetchPlannerTest, ALayersOwnReadaheadMinHoldsBackALoneRandomRead) {
  LayerTable table;
  TableLock lock(table);
  auto layer = MakeTestLayer(table, 100, ChunkState::kMissing);
  LayerGuard held(*layer, Held(table));
  layer->readahead_min = 8 * kMiB;  // a lazily decoded layer (LayerSpec::readahead_min)
  const CacheOptions options;
  for (uint64_t at = 40 * kMiB; at < 44 * kMiB;
       at += kMiB) {  // one 4 MiB read, as the kernel sends it
    UpdateReadahead(*layer, options, at, at + kMiB);
  }
  EXPECT_EQ(layer->window, 0u);
  UpdateReadahead(*layer, options, 44 * kMiB, 48 * kMiB);
  EXPECT_EQ(layer->window, 8 * kMiB);  // half of 8 MiB, raised to the layer's minimum
  layer->readahead_min = kMiB;         // below the cache's: the cache's holds
  UpdateReadahead(*layer, options, 90 * kMiB, 92 * kMiB);
  EXPECT_EQ(layer->window, 0u);
}

TEST(FetchPlannerTest, AReadUpToEightChunksPastTheRunContinuesIt) {
  LayerTable table;
  TableLock lock(table);
  auto layer = MakeTestLayer(table, 100, ChunkState::kMissing);
  LayerGuard held(*layer, Held(table));
  const CacheOptions options;
  UpdateReadahead(*layer, options, 0, 30 * kMiB);
  UpdateReadahead(*layer, options, 38 * kMiB, 39 * kMiB);
  EXPECT_EQ(layer->run_start, 0u);
  EXPECT_EQ(layer->run_end, 39 * kMiB);
  EXPECT_EQ(layer->window, 39 * kMiB / 2);
}

TEST(FetchPlannerTest, AReadFartherAwayStartsANewRunWithoutReadahead) {
  LayerTable table;
  TableLock lock(table);
  auto layer = MakeTestLayer(table, 100, ChunkState::kMissing);
  LayerGuard held(*layer, Held(table));
  const CacheOptions options;
  UpdateReadahead(*layer, options, 0, 30 * kMiB);
  UpdateReadahead(*layer, options, 50 * kMiB, 51 * kMiB);
  EXPECT_EQ(layer->run_start, 50 * kMiB);
  EXPECT_EQ(layer->run_end, 51 * kMiB);
  EXPECT_EQ(layer->window, 0u);
}

TEST(FetchPlannerTest, ReadsThatStartNewRunsCountAsScatteredAndMoveTheFront) {
  LayerTable table;
  TableLock lock(table);
  auto layer = MakeTestLayer(table, 100, ChunkState::kMissing);
  LayerGuard held(*layer, Held(table));
  const CacheOptions options;  // stream_after 32 MiB
  // Four ranks, each copying its quarter of a 64 MiB tensor, one 1 MiB fault at a time: each
  // quarter starts farther past the others' runs than the 8 chunks a run may skip.
  for (uint64_t step = 0; step < 8; ++step) {
    for (uint64_t rank = 0; rank < 4; ++rank) {
      const uint64_t at = rank * 16 * kMiB + step * kMiB;
      UpdateReadahead(*layer, options, at, at + kMiB);
    }
  }
  EXPECT_EQ(layer->scattered_bytes, 32 * kMiB);  // not one read continued the run before it
  EXPECT_EQ(layer->read_front, 56 * kMiB);
  EXPECT_EQ(layer->window, 0u);
  EXPECT_TRUE(ScatteredReadersWantStream(*layer, options));
}

TEST(FetchPlannerTest, OneSequentialReaderIsNotScattered) {
  LayerTable table;
  TableLock lock(table);
  auto layer = MakeTestLayer(table, 100, ChunkState::kMissing);
  LayerGuard held(*layer, Held(table));
  const CacheOptions options;
  for (uint64_t at = 0; at < 64 * kMiB; at += kMiB) UpdateReadahead(*layer, options, at, at + kMiB);
  EXPECT_EQ(layer->scattered_bytes, kMiB);  // the first read started the run
  EXPECT_FALSE(ScatteredReadersWantStream(*layer, options));
}

TEST(FetchPlannerTest, AScatteredStreamRunsAheadOfTheFarthestReadAndSkipsNothingBehindIt) {
  LayerTable table;
  TableLock lock(table);
  auto layer = MakeTestLayer(table, 1000, ChunkState::kMissing);
  LayerGuard held(*layer, Held(table));
  const CacheOptions options;  // 64 MiB requests, 4 segments
  layer->stream_scattered = true;
  layer->run_start = 24 * kMiB;  // the last rank to read
  layer->run_end = 25 * kMiB;
  layer->read_front = 40 * kMiB;
  const StreamPlan plan = PlanStream(*layer, options);
  EXPECT_EQ(layer->stream_next, 0u);  // the gaps the ranks left behind are fetched too
  EXPECT_EQ(plan.limit, 40u + 4 * 64);
}

TEST(FetchPlannerTest, AMissingRunStopsAtAChunkThatIsNotMissing) {
  LayerTable table;
  TableLock lock(table);
  auto layer = MakeTestLayer(table, 10, ChunkState::kMissing);
  LayerGuard held(*layer, Held(table));
  layer->state[4] = ChunkState::kInFlight;
  EXPECT_EQ(MissingRunEnd(*layer, 0, 9, 16 * kMiB), 4u);
}

TEST(FetchPlannerTest, AMissingRunStopsAtTheRequestCapButHoldsAtLeastOneChunk) {
  LayerTable table;
  TableLock lock(table);
  auto layer = MakeTestLayer(table, 10, ChunkState::kMissing);
  LayerGuard held(*layer, Held(table));
  EXPECT_EQ(MissingRunEnd(*layer, 5, 9, 3 * kMiB), 8u);
  EXPECT_EQ(MissingRunEnd(*layer, 5, 9, 1), 6u);
  EXPECT_EQ(MissingRunEnd(*layer, 5, 6, 16 * kMiB), 7u);
}

TEST(FetchPlannerTest, AStreamAsksForSegmentsUpToStreamSegmentsAheadOfTheReader) {
  LayerTable table;
  TableLock lock(table);
  auto layer = MakeTestLayer(table, 1000, ChunkState::kMissing);
  LayerGuard held(*layer, Held(table));
  const CacheOptions options;  // 64 MiB requests, 4 segments, max_request_bytes 16 MiB
  layer->run_end = 32 * kMiB;
  layer->stream_next = 33;
  const StreamPlan plan = PlanStream(*layer, options);
  EXPECT_EQ(plan.per_request, 64u);
  EXPECT_EQ(plan.limit, 32u + 4 * 64);
  std::vector<std::pair<uint64_t, uint64_t>> asked;
  while (std::optional<StreamSegment> segment = NextStreamSegment(*layer, options, plan)) {
    EXPECT_EQ(segment->pieces, 4);  // 64 MiB is four 16 MiB requests' worth of deadline
    asked.emplace_back(segment->first, segment->last);
  }
  EXPECT_EQ(asked, (std::vector<std::pair<uint64_t, uint64_t>>{
                       {33, 96}, {97, 160}, {161, 224}, {225, 288}}));
  EXPECT_EQ(layer->stream_next, 289u);
}

TEST(FetchPlannerTest, AStreamWithAllSegmentsInFlightAsksForNothing) {
  LayerTable table;
  TableLock lock(table);
  auto layer = MakeTestLayer(table, 1000, ChunkState::kMissing);
  LayerGuard held(*layer, Held(table));
  const CacheOptions options;
  layer->stream_in_flight = options.stream_segments;
  const StreamPlan plan = PlanStream(*layer, options);
  EXPECT_FALSE(NextStreamSegment(*layer, options, plan).has_value());
}

TEST(FetchPlannerTest, AStreamNeverAsksAgainForWhatTheReaderPassed) {
  LayerTable table;
  TableLock lock(table);
  auto layer = MakeTestLayer(table, 100, ChunkState::kMissing);
  LayerGuard held(*layer, Held(table));
  const CacheOptions options;
  layer->run_end = 90 * kMiB;
  const StreamPlan plan = PlanStream(*layer, options);
  std::optional<StreamSegment> segment = NextStreamSegment(*layer, options, plan);
  ASSERT_TRUE(segment.has_value());
  EXPECT_EQ(segment->first, 90u);
  EXPECT_EQ(segment->last, 99u);  // the layer ends first
  EXPECT_EQ(segment->pieces, 1);
}

}  // namespace
}  // namespace modelfs
