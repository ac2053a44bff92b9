// FetchScheduler: the cache's work queue. Jobs (range fetches, whole-layer checks, journal
// writes) run by priority, lower first, in submission order within a priority, on a pool of
// threads per registry endpoint, so that requests hung on one registry never take the threads
// another registry's reads need. A queued job can be promoted when a foreground reader comes to
// wait for it.
//
// Thread safety: all methods are safe to call concurrently. Its mutex is a leaf: callers may
// hold their own locks when they call in; jobs run with no scheduler lock held.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace modelfs {

class FetchScheduler {
 public:
  // Where a submitted job stands, for Promote. Opaque to callers.
  class Ticket;

  explicit FetchScheduler(int threads_per_endpoint);
  // Stop(), dropping what it returns.
  ~FetchScheduler();
  FetchScheduler(const FetchScheduler&) = delete;
  FetchScheduler& operator=(const FetchScheduler&) = delete;

  // Queues `run` on `endpoint`'s threads (started on its first job). `dropped`, if set, is
  // what Stop hands back for a job that never ran.
  std::shared_ptr<Ticket> Submit(const std::string& endpoint, int priority,
                                 std::function<void()> run,
                                 std::function<void()> dropped = nullptr);
  // Moves a job that is still queued to `priority`, if that runs it sooner.
  void Promote(const std::shared_ptr<Ticket>& ticket, int priority);

  // Blocks until nothing is queued or running, or until `deadline`; false on timeout. Jobs
  // that a running job submits count as queued before it ends.
  bool WaitIdle(absl::Time deadline);

  // Stops every pool: running jobs finish, queued ones never start. Returns the `dropped`
  // callbacks of those, for the caller to run (under its own lock, say). Idempotent.
  std::vector<std::function<void()>> Stop();

 private:
  struct Job {
    std::function<void()> run;
    std::function<void()> dropped;
    std::shared_ptr<Ticket> ticket;
  };
  using Key = std::pair<int, uint64_t>;  // (priority, submission order)
  void WorkerLoop(std::string endpoint);

  const int threads_per_endpoint_;
  absl::Mutex mu_;
  // Per endpoint (a std::map: its queues stay where they are while workers wait on them).
  std::map<std::string, std::map<Key, Job>> queues_ ABSL_GUARDED_BY(mu_);
  uint64_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace modelfs
