// Work that must not compete with the node's foreground: the cache's whole-layer audit rereads
// and rehashes a model while a model server may still be starting on it.
//
// Thread safety: RunAtBackgroundPriority may be called from any thread.
#pragma once

#include <functional>

namespace modelfs {

// Runs `work` on a thread of its own at the lowest CPU priority (nice 19) and in the idle I/O
// class (the disk serves it only when nobody else asks), and returns when it is done. The
// calling thread keeps its priority. Where a priority cannot be set, `work` runs anyway.
void RunAtBackgroundPriority(const std::function<void()>& work);

}  // namespace modelfs
