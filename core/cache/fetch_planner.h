// The fetch planner: what BlobCache fetches next for a layer, and in what pieces. Readahead
// follows a reader's sequential run; a reader that loads a layer from start to end gets the
// rest of it streamed in large parallel segments; missing chunks are coalesced into range
// requests. BlobCache turns the plans into flights (cache_layer.h) and queues them.
//
// All of it runs under the cache's mutex, on the read path: the small functions are inline.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "core/cache/cache_layer.h"
#include "core/cache/cache_options.h"

namespace modelfs {

// Extends the layer's sequential run with a read of [offset, end), or starts a new one, and
// sets its readahead window.
inline void UpdateReadahead(CacheLayer& layer, const CacheOptions& options, uint64_t offset,
                            uint64_t end) ABSL_EXCLUSIVE_LOCKS_REQUIRED(layer.mu) {
  // The kernel sends a streaming reader's requests in parallel (its readahead: 8 requests of
  // a chunk each), so they arrive a little out of order: a read that starts inside the current
  // run, or at most 8 chunks past its end, continues it. A run earns readahead once it is
  // readahead_min long, and the window is half the run: a lone random read (the kernel turns
  // 4 MiB into about 8) fetches little beyond it, a loader streaming a file soon gets the most.
  const uint64_t slack = 8 * layer.chunk_size;
  const uint64_t min = std::max(layer.readahead_min, options.readahead_min);
  layer.read_front = std::max(layer.read_front, end);
  if (layer.run_end != 0 && offset >= layer.run_start && offset <= layer.run_end + slack) {
    layer.run_end = std::max(layer.run_end, end);
    const uint64_t run = layer.run_end - layer.run_start;
    layer.window = run < std::max<uint64_t>(min, 1)
                       ? 0
                       : std::clamp(run / 2, min, std::max(min, options.readahead_max));
  } else {
    layer.run_start = offset;
    layer.run_end = end;
    layer.window = 0;
    layer.scattered_bytes += end - offset;
  }
}

// Whether readers that make no one run should get the layer streamed: tensor-parallel ranks
// fault every tensor at N places at once, each rank's reads too short and too far apart to
// extend a run, so neither readahead nor the run's stream ever starts, and every fault is a
// small request of its own. Once stream_after bytes were read that way the layer is being
// loaded, not sampled: a lone random read (4 MiB: the kernel's requests extend one run) or a
// header lookup stays far below it.
inline bool ScatteredReadersWantStream(const CacheLayer& layer, const CacheOptions& options)
    ABSL_SHARED_LOCKS_REQUIRED(layer.mu) {
  return options.stream_segments > 0 && !layer.streaming &&
         layer.scattered_bytes >= options.stream_after && layer.stream_next < layer.count();
}

// One past the end of the run of missing chunks that starts at `start` (a missing chunk): it
// stops at `last`, at a chunk that is not missing, or before the run would pass `max_request`
// bytes (it always holds `start`). One range request fetches the run.
inline uint64_t MissingRunEnd(const CacheLayer& layer, uint64_t start, uint64_t last,
                              uint64_t max_request) ABSL_SHARED_LOCKS_REQUIRED(layer.mu) {
  uint64_t c = start;
  uint64_t bytes = 0;
  while (c <= last && c < layer.count() && layer.state[c] == ChunkState::kMissing &&
         (c == start || bytes + layer.ChunkLen(c) <= max_request)) {
    bytes += layer.ChunkLen(c);
    ++c;
  }
  return c;
}

// A request of a layer's stream: chunks [first, last], worth `pieces` ordinary requests (its
// deadline is that many background deadlines).
struct StreamSegment {
  uint64_t first = 0;
  uint64_t last = 0;
  int64_t pieces = 1;
};

// Where a layer's stream stands against its reader: how many chunks one stream request takes,
// and the chunk no request may reach (stream_segments requests ahead of the reader).
struct StreamPlan {
  uint64_t per_request = 1;
  uint64_t limit = 0;
};

// Plans the stream from where its reader is now; a stream never asks again for what the reader
// has passed (the reader fetched it). A scattered stream (stream_scattered) plans from the
// farthest read and passes nothing over: behind it, the ranks' reads left gaps.
StreamPlan PlanStream(CacheLayer& layer, const CacheOptions& options)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(layer.mu);

// The next request of the stream, while fewer than stream_segments are in flight and the plan's
// limit is not reached; takes its chunks off the stream (stream_next).
std::optional<StreamSegment> NextStreamSegment(CacheLayer& layer, const CacheOptions& options,
                                               const StreamPlan& plan)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(layer.mu);

}  // namespace modelfs
