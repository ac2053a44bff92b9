// Daemon metrics: a lock-free latency histogram, the Prometheus text rendering of the daemon's
// counters, and a small HTTP endpoint (libmicrohttpd) that serves it at /metrics.
//
// Thread-safety: LatencyHistogram::Observe and Render may run concurrently; MetricsServer calls
// its render function from its own thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cache/blob_cache.h"

struct MHD_Daemon;

namespace modelfs::snapshotter {

class LatencyHistogram {
 public:
  // Upper bounds in seconds; the +Inf bucket is implicit.
  static constexpr std::array<double, 14> kBounds = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  void Observe(absl::Duration d);
  // Prometheus histogram lines for `name` (cumulative buckets, _sum, _count).
  std::string Render(const std::string& name, const std::string& help) const;
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
};

struct DaemonCounters {
  CacheStats cache;
  uint64_t remote_mounted = 0;
  uint64_t remote_fallback = 0;
  uint64_t remote_error = 0;
  // Signature policy: refusals by reason (TrustReason names, "policy_unreadable"), and
  // evaluations that asked a registry (kept verdicts excluded).
  std::map<std::string, uint64_t> policy_refusals;
  uint64_t policy_evaluations = 0;
  uint64_t active_models = 0;
  uint64_t read_errors = 0;
  uint64_t passthrough_opens = 0;  // opens served by FUSE passthrough (the kernel reads)
  uint64_t cache_max_bytes = 0;    // cache.max_size_gib in bytes; 0: unbounded
  bool disk_full = false;          // the cache's disk refused a write: serving from memory
  // The daemon's version, rendered as modelfs_build_info{version="..."} 1; "" = not rendered.
  std::string version;
};

// The whole /metrics page.
std::string RenderPrometheus(const DaemonCounters& c, const LatencyHistogram& reads);

class MetricsServer {
 public:
  // Listens on host:port (port 0 picks one) and answers GET /metrics with render().
  // Errors: kInvalidArgument (host does not resolve), kUnavailable (cannot listen).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& host,
                                                              uint16_t port,
                                                              std::function<std::string()> render);
  ~MetricsServer();
  uint16_t port() const { return port_; }
  std::string Render() const { return render_(); }

 private:
  MetricsServer() = default;
  MHD_Daemon* daemon_ = nullptr;
  uint16_t port_ = 0;
  std::function<std::string()> render_;
};

}  // namespace modelfs::snapshotter
