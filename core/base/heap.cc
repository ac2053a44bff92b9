// BoundHeapGrowth (see heap.h).
#include "core/base/heap.h"

#include <malloc.h>

namespace modelfs {

void BoundHeapGrowth() {
  // A fixed threshold (setting it turns glibc's dynamic one off): buffers of 256 KiB and more
  // are mapped and given back on free.
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  mallopt(M_ARENA_MAX, 4);
}

}  // namespace modelfs
