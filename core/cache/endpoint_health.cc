#include "core/cache/endpoint_health.h"

#include <algorithm>

namespace modelfs {

EndpointHealth::EndpointHealth(EndpointHealthOptions options) : options_(options) {}

absl::Time EndpointHealth::ReadDeadline(const std::string& endpoint, absl::Time now,
                                        absl::Duration read_deadline) {
  absl::MutexLock lock(&mu_);
  auto it = endpoints_.find(endpoint);
  if (it == endpoints_.end() || now >= it->second.fail_fast_until) return now + read_deadline;
  return now + std::min(read_deadline, options_.fail_fast_wait);
}

bool EndpointHealth::RecordTimeout(const std::string& endpoint, absl::Time now) {
  absl::MutexLock lock(&mu_);
  State& s = endpoints_[endpoint];
  const bool was_healthy = !s.failing;
  s.failing = true;
  s.fail_fast_until = now + options_.retry_window;
  return was_healthy;
}

bool EndpointHealth::RecordSuccess(const std::string& endpoint) {
  absl::MutexLock lock(&mu_);
  auto it = endpoints_.find(endpoint);
  if (it == endpoints_.end()) return false;
  const bool was_failing = it->second.failing;
  endpoints_.erase(it);
  return was_failing;
}

void EndpointHealth::RecordError(const std::string& endpoint, absl::Time now,
                                 const std::string& message) {
  absl::MutexLock lock(&mu_);
  LastError& e = errors_[endpoint];
  e.at = now;
  e.message = message;
  e.count++;
}

std::map<std::string, EndpointHealth::LastError> EndpointHealth::Errors() const {
  absl::MutexLock lock(&mu_);
  return errors_;
}

}  // namespace modelfs
