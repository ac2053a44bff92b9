#include "core/cache/fetch_planner.h"

namespace modelfs {

StreamPlan PlanStream(CacheLayer& layer, const CacheOptions& options) {
  // Requests are large (each one costs the registry far more than its bytes: Distribution
  // 2.8 spent 0.5 CPU-s on one GET of 1 GiB, twice that on 64 ranges of 16 MiB), several run
  // at once, and none asks for more than stream_segments requests ahead of the reader. What
  // is fetched ahead waits in the page cache until the reader takes it, and then leaves it
  // (drop_served_pages): so the node holds little more than one copy of the weights, and a
  // page that is freed is soon used again (on a VM whose host takes back free memory, a page
  // touched for the first time costs far more than one reused).
  const uint64_t cs = layer.chunk_size;
  StreamPlan plan;
  plan.per_request = std::max<uint64_t>(1, (options.stream_request_bytes + cs - 1) / cs);
  uint64_t reader = layer.run_end / cs;
  if (layer.stream_scattered) {
    reader = std::max(layer.run_end, layer.read_front) / cs;
  } else {
    layer.stream_next = std::max(layer.stream_next, reader);  // what it passed, it fetched
  }
  plan.limit = std::min<uint64_t>(
      layer.count(), reader + plan.per_request * static_cast<uint64_t>(options.stream_segments));
  return plan;
}

std::optional<StreamSegment> NextStreamSegment(CacheLayer& layer, const CacheOptions& options,
                                               const StreamPlan& plan) {
  if (layer.stream_in_flight >= options.stream_segments || layer.stream_next >= plan.limit) {
    return std::nullopt;
  }
  StreamSegment segment;
  segment.first = layer.stream_next;
  segment.last = std::min(layer.count(), segment.first + plan.per_request) - 1;
  layer.stream_next = segment.last + 1;
  // The deadline grows with the request: one of many max_request_bytes gets as long as that
  // many would have (a stalled one is cut off by the client's stall check).
  segment.pieces = static_cast<int64_t>(
      std::max<uint64_t>(1, (segment.last - segment.first + 1) * layer.chunk_size /
                                std::max<uint64_t>(1, options.max_request_bytes)));
  return segment;
}

}  // namespace modelfs
