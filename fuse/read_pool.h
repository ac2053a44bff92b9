// ReadPool: the threads that serve FUSE requests which must wait for the network (a read of
// bytes not yet cached, the first lookup of a lazily made file), so that the session's worker
// threads stay free for cached reads, lookups and listings however many reads are stalled.
// With every worker blocked on the network, a read of cached bytes would wait for the stalled
// ones to time out. Threads are started as needed, up to `max_threads`; beyond that, jobs
// queue.
//
// Thread safety: Submit and Stop may be called from any thread (one mutex, a leaf).
#pragma once

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace modelfs {

class ReadPool {
 public:
  explicit ReadPool(unsigned max_threads) : max_threads_(max_threads) {}
  ~ReadPool() { Stop(); }
  ReadPool(const ReadPool&) = delete;
  ReadPool& operator=(const ReadPool&) = delete;

  // Queues `job`, starting a thread if none is idle and there is room for one. After Stop the
  // job is dropped: its request goes unanswered, as the connection is going away.
  void Submit(std::function<void()> job);

  // Drops queued jobs (their requests stay unanswered: after Detach the kernel resends them to
  // the next process; after Unmount nobody waits) and waits for running ones, which are
  // bounded by the cache's read deadline.
  void Stop();

 private:
  void Run();

  const unsigned max_threads_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  unsigned idle_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace modelfs
