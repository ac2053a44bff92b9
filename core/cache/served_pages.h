// The served-page dropper (CacheOptions::drop_served_pages): once every byte of a chunk has gone
// to a reader and the chunk is flushed to disk, its pages of the layer's data file leave the
// page cache (POSIX_FADV_DONTNEED). The reader's copy (the FUSE file's pages, or the process's
// own buffer) is the one the node keeps, so a cold load holds one copy of the weights, not two.
//
// BlobCache calls these under its mutex (the bookkeeping) and DropPages outside it (the
// syscalls).
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "core/cache/cache_layer.h"

namespace modelfs {

// Byte ranges [from, to) of a layer's data file whose pages are to be dropped.
using PageRanges = std::vector<std::pair<uint64_t, uint64_t>>;

// Counts bytes [from, to) of `layer` as served (a reply holding them was sent), for the chunks
// that are servable. Returns the chunks that are now wholly served and flushed.
std::vector<uint64_t> CountServed(CacheLayer& layer, uint64_t from, uint64_t to)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(layer.mu);

// Marks `chunks` as flushed to disk (their pages are clean) and, when `drop_served_pages`,
// takes those of them wholly served: returns their byte ranges, for DropPages outside the lock,
// counts them as unserved again and adds their bytes to `dropped_bytes`.
PageRanges TakeServedDrops(CacheLayer& layer, const std::vector<uint64_t>& chunks,
                           bool drop_served_pages, std::atomic<uint64_t>& dropped_bytes)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(layer.mu);

// Drops the pages of `ranges` of the layer's data file from the page cache. Only clean pages
// go; a failure leaves them cached, which is always safe.
void DropPages(const CacheLayer& layer, const PageRanges& ranges);

}  // namespace modelfs
