// ReadPool (see read_pool.h).
#include "fuse/read_pool.h"

#include <utility>

namespace modelfs {

void ReadPool::Submit(std::function<void()> job) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;  // the request goes unanswered: the connection is going away
  queue_.push_back(std::move(job));
  if (idle_ == 0 && threads_.size() < max_threads_) {
    threads_.emplace_back([this] { Run(); });
  }
}

void ReadPool::Stop() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    queue_.clear();
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
}

void ReadPool::Run() {
  absl::MutexLock lock(&mu_);
  while (true) {
    idle_++;
    auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
    mu_.Await(absl::Condition(&ready));
    idle_--;
    if (stopping_) return;
    std::function<void()> job = std::move(queue_.front());
    queue_.pop_front();
    mu_.Unlock();
    job();
    mu_.Lock();
  }
}

}  // namespace modelfs
