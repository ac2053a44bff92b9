#include "core/cache/seek_window_source.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status/status_macros.h"

namespace modelfs {

absl::StatusOr<std::shared_ptr<const std::string>> SeekWindowSource::Window(size_t point,
                                                                            absl::Time deadline) {
  if (point >= table_->windows.size() || table_->windows[point].length == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(layer_, ": seek point ", point, " has no window"));
  }
  std::shared_ptr<Entry> e;
  bool fetcher = false;
  {
    absl::MutexLock l(&mu_);
    auto it = entries_.find(point);
    if (it == entries_.end()) {
      e = std::make_shared<Entry>();
      entries_[point] = e;
      fetcher = true;
    } else {
      e = it->second;
    }
  }
  if (!fetcher) {
    hits_.fetch_add(1, std::memory_order_relaxed);
    absl::MutexLock l(&mu_);
    const Entry* ep = e.get();
    auto done = [ep]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return ep->done; };
    if (!mu_.AwaitWithDeadline(absl::Condition(&done), deadline)) {
      return absl::DeadlineExceededError(
          absl::StrCat(layer_, ": waiting for the window of seek point ", point, " to be fetched"));
    }
    if (!e->status.ok()) return e->status;
    return e->bytes;
  }
  const SeekWindowRef& w = table_->windows[point];
  absl::StatusOr<std::string> got = fetch_(w.offset, w.length, deadline);
  absl::Status s = got.status();
  if (s.ok()) s = CheckSeekWindow(*table_, point, *got, layer_);
  fetches_.fetch_add(1, std::memory_order_relaxed);
  if (got.ok()) fetched_bytes_.fetch_add(got->size(), std::memory_order_relaxed);
  absl::MutexLock l(&mu_);
  e->done = true;
  if (!s.ok()) {
    failures_.fetch_add(1, std::memory_order_relaxed);
    e->status = s;  // the waiters see it; the next request fetches again
    auto it = entries_.find(point);
    if (it != entries_.end() && it->second == e) entries_.erase(it);
    return s;
  }
  e->bytes = std::make_shared<const std::string>(*std::move(got));
  order_.push_back(point);
  held_bytes_ += e->bytes->size();
  EvictLocked();
  return e->bytes;
}

void SeekWindowSource::EvictLocked() {
  // The newest window stays even when it alone is over the bound.
  while (held_bytes_ > max_bytes_ && order_.size() > 1) {
    auto it = entries_.find(order_.front());
    if (it != entries_.end() && it->second->bytes != nullptr) {
      held_bytes_ -= std::min<uint64_t>(held_bytes_, it->second->bytes->size());
      entries_.erase(it);
    }
    order_.pop_front();
  }
}

SeekWindowSource::Stats SeekWindowSource::stats() const {
  Stats s;
  s.fetches = fetches_.load(std::memory_order_relaxed);
  s.fetched_bytes = fetched_bytes_.load(std::memory_order_relaxed);
  s.hits = hits_.load(std::memory_order_relaxed);
  s.failures = failures_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace modelfs
