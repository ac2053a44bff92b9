// Daemon metrics: a lock-free latency histogram, per-registry request counters and latency
// (RegistryMetrics, the registry clients' observer), the Prometheus text rendering of the
// daemon's counters, and a small HTTP endpoint (libmicrohttpd) that serves it at /metrics.
//
// Thread-safety: LatencyHistogram::Observe and Render may run concurrently; so may
// RegistryMetrics::OnRequest and Snapshot; MetricsServer calls its render function from its
// own thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/cache/blob_cache.h"
#include "core/registry/registry_observer.h"

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

// Requests to registries, by registry, kind and outcome, and their latency: what every
// registry client of the daemon reports (RegistryClientOptions::observer).
class RegistryMetrics : public RegistryObserver {
 public:
  // Upper bounds in seconds of the latency buckets (+Inf implicit): a token or manifest
  // answers in milliseconds, a blob range in up to a minute (the stall timeout).
  static constexpr std::array<double, 13> kBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                     1,     2.5,  5,     10,   30,  60};
  // Outcomes, the `code` label: the HTTP status class, or "error" (no complete answer).
  static constexpr std::array<const char*, 5> kCodes = {"2xx", "3xx", "4xx", "5xx", "error"};
  // Registries beyond this many are counted under registry="other" (labels stay bounded).
  static constexpr size_t kMaxRegistries = 32;

  struct Series {
    std::string registry;
    std::string kind;
    std::array<uint64_t, kCodes.size()> codes{};
    std::array<uint64_t, kBounds.size() + 1> buckets{};  // per bucket, not cumulative
    uint64_t count = 0;
    double sum_seconds = 0;
  };

  void OnRequest(const RegistryRequestRecord& record) override;
  // Every series so far, ordered by registry and kind.
  std::vector<Series> Snapshot() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::pair<std::string, std::string>, Series> series_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> registries_ ABSL_GUARDED_BY(mu_);
};

struct DaemonCounters {
  CacheStats cache;
  uint64_t remote_mounted = 0;
  uint64_t remote_fallback = 0;
  uint64_t remote_error = 0;
  // Signature policy: refusals by reason (TrustReason names, "policy_unreadable"), and
  // evaluations that asked a registry (kept verdicts excluded).
  std::map<std::string, uint64_t> policy_refusals;
  std::map<std::string, uint64_t> equivalence_refusals;  // require_equivalence, by reason
  uint64_t policy_evaluations = 0;
  uint64_t active_models = 0;
  uint64_t read_errors = 0;
  uint64_t passthrough_opens = 0;  // opens served by FUSE passthrough (the kernel reads)
  uint64_t cache_max_bytes = 0;    // cache.max_size_gib in bytes; 0: unbounded
  bool disk_full = false;          // the cache's disk refused a write: serving from memory
  // The daemon's version and the commit it was built from, rendered as
  // modelfs_build_info{version="...",commit="..."} 1; version "" = not rendered.
  std::string version;
  std::string commit;
  // RegistryMetrics::Snapshot: modelfs_registry_requests_total and
  // modelfs_registry_request_duration_seconds (their HELP and TYPE even when empty).
  std::vector<RegistryMetrics::Series> registry;
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
