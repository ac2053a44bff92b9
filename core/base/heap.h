// BoundHeapGrowth: keeps the process's heap from growing with the bytes it moves.
//
// The read path allocates and frees buffers of about a megabyte on many threads (libfuse's
// reply buffers, one chunk per fetch). glibc then raises its mmap threshold to that size and
// serves them from per-thread arenas, which keep what was freed: peak RSS grew with the
// number of threads and the model (167 MiB for a 1 GiB cold load, 32 MiB with this).
#pragma once

namespace modelfs {

// Call once at the start of main, before any thread starts.
void BoundHeapGrowth();

}  // namespace modelfs
