#include "core/cache/fetch_scheduler.h"

namespace modelfs {

class FetchScheduler::Ticket {
 public:
  std::string endpoint;
  Key key;              // guarded by the scheduler's mutex
  bool queued = false;  // likewise
};

FetchScheduler::FetchScheduler(int threads_per_endpoint)
    : threads_per_endpoint_(threads_per_endpoint < 1 ? 1 : threads_per_endpoint) {}

FetchScheduler::~FetchScheduler() { Stop(); }

std::shared_ptr<FetchScheduler::Ticket> FetchScheduler::Submit(const std::string& endpoint,
                                                               int priority,
                                                               std::function<void()> run,
                                                               std::function<void()> dropped) {
  auto ticket = std::make_shared<Ticket>();
  ticket->endpoint = endpoint;
  absl::MutexLock lock(&mu_);
  auto [queue, created] = queues_.try_emplace(endpoint);
  if (created && !stopping_) {
    for (int i = 0; i < threads_per_endpoint_; ++i) {
      workers_.emplace_back([this, endpoint] { WorkerLoop(endpoint); });
    }
  }
  ticket->key = Key(priority, next_seq_++);
  ticket->queued = true;
  queue->second.emplace(ticket->key, Job{std::move(run), std::move(dropped), ticket});
  queued_++;
  return ticket;
}

void FetchScheduler::Promote(const std::shared_ptr<Ticket>& ticket, int priority) {
  absl::MutexLock lock(&mu_);
  if (!ticket->queued || ticket->key.first <= priority) return;
  auto& queue = queues_[ticket->endpoint];
  auto node = queue.extract(ticket->key);
  if (node.empty()) return;
  ticket->key.first = priority;
  node.key() = ticket->key;
  queue.insert(std::move(node));
}

void FetchScheduler::WorkerLoop(std::string endpoint) {
  while (true) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      std::map<Key, Job>* queue = &queues_[endpoint];
      auto ready = [this, queue]()
                       ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_ || !queue->empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      auto it = queue->begin();
      job = std::move(it->second);
      queue->erase(it);
      queued_--;
      job.ticket->queued = false;
      running_++;
    }
    job.run();
    job = Job();  // what the job held goes before it counts as done
    absl::MutexLock lock(&mu_);
    running_--;
  }
}

bool FetchScheduler::WaitIdle(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return queued_ == 0 && running_ == 0; };
  return mu_.AwaitWithDeadline(absl::Condition(&idle), deadline);
}

std::vector<std::function<void()>> FetchScheduler::Stop() {
  std::vector<std::thread> workers;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    workers.swap(workers_);
  }
  for (auto& t : workers) t.join();
  std::vector<std::function<void()>> dropped;
  absl::MutexLock lock(&mu_);
  for (auto& [endpoint, queue] : queues_) {
    for (auto& [key, job] : queue) {
      job.ticket->queued = false;
      if (job.dropped) dropped.push_back(std::move(job.dropped));
    }
    queue.clear();
  }
  queued_ = 0;
  return dropped;
}

}  // namespace modelfs
