// BoundHeapGrowth (see heap.h).
#include "core/base/heap.h"

#include <malloc.h>

namespace modelfs {

void BoundHeapGrowth() {
  // A fixed threshold (setting it turns glibc's dynamic one off): buffers of 640 KiB and more
  // are mapped and given back on free. Below it sit libcurl's 512 KiB receive buffers, one per
  // request: mapped, every page of each would fault again on each request. The megabyte
  // buffers of the read path are pooled (buffer_pool.h) instead.
  mallopt(M_MMAP_THRESHOLD, 640 * 1024);
  mallopt(M_ARENA_MAX, 4);
  // Setting the mmap threshold also fixes the trim threshold at its 128 KiB default: a freed
  // receive buffer at the top of an arena was given back to the kernel, and the next request's
  // recv faulted its pages in again (3.4% of a cold load's CPU, all in the socket copy). An
  // arena now keeps up to this much free at its top; peak RSS does not change.
  mallopt(M_TRIM_THRESHOLD, 16 << 20);
}

}  // namespace modelfs
