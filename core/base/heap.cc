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
}

}  // namespace modelfs
