// Prometheus metrics of the daemon (see metrics.h).
#include "cmd/modelfs-snapshotter/metrics.h"

#include <microhttpd.h>
#include <netdb.h>
#include <string.h>
#include <sys/socket.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace modelfs::snapshotter {

void LatencyHistogram::Observe(absl::Duration d) {
  double s = absl::ToDoubleSeconds(d);
  size_t i = 0;
  while (i < kBounds.size() && s > kBounds[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(absl::ToInt64Nanoseconds(d)), std::memory_order_relaxed);
}

std::string LatencyHistogram::Render(const std::string& name, const std::string& help) const {
  std::string out = absl::StrCat("# HELP ", name, " ", help, "\n# TYPE ", name, " histogram\n");
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    absl::StrAppend(&out, name, "_bucket{le=\"", absl::StrFormat("%g", kBounds[i]), "\"} ",
                    cumulative, "\n");
  }
  cumulative += buckets_[kBounds.size()].load(std::memory_order_relaxed);
  absl::StrAppend(&out, name, "_bucket{le=\"+Inf\"} ", cumulative, "\n");
  absl::StrAppend(&out, name, "_sum ",
                  absl::StrFormat("%.9f", static_cast<double>(sum_ns_.load()) / 1e9), "\n");
  absl::StrAppend(&out, name, "_count ", cumulative, "\n");
  return out;
}

void RegistryMetrics::OnRequest(const RegistryRequestRecord& r) {
  const long cls = r.status / 100;
  const size_t code = cls >= 2 && cls <= 5 ? static_cast<size_t>(cls - 2) : kCodes.size() - 1;
  const double s = absl::ToDoubleSeconds(r.elapsed);
  size_t bucket = 0;
  while (bucket < kBounds.size() && s > kBounds[bucket]) ++bucket;
  std::string registry(r.registry);
  absl::MutexLock lock(&mu_);
  if (!registries_.contains(registry)) {
    if (registries_.size() >= kMaxRegistries) {
      registry = "other";
    } else {
      registries_.insert(registry);
    }
  }
  const std::string kind(RegistryRequestKindName(r.kind));
  Series& series = series_[{registry, kind}];
  if (series.registry.empty()) {
    series.registry = registry;
    series.kind = kind;
  }
  series.codes[code]++;
  series.buckets[bucket]++;
  series.count++;
  series.sum_seconds += s;
}

std::vector<RegistryMetrics::Series> RegistryMetrics::Snapshot() const {
  absl::MutexLock lock(&mu_);
  std::vector<Series> out;
  out.reserve(series_.size());
  for (const auto& [key, series] : series_) out.push_back(series);
  return out;
}

namespace {

// A label value as the text format wants it: '\\', '"' and newline escaped.
std::string LabelValue(absl::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

void RenderRegistry(std::string& out, const std::vector<RegistryMetrics::Series>& all) {
  absl::StrAppend(&out,
                  "# HELP modelfs_registry_requests_total HTTP requests to registries (each "
                  "retry, redirect and token request counts), by registry, kind and outcome.\n"
                  "# TYPE modelfs_registry_requests_total counter\n");
  for (const RegistryMetrics::Series& s : all) {
    for (size_t i = 0; i < RegistryMetrics::kCodes.size(); ++i) {
      absl::StrAppend(&out, "modelfs_registry_requests_total{registry=\"", LabelValue(s.registry),
                      "\",kind=\"", s.kind, "\",code=\"", RegistryMetrics::kCodes[i], "\"} ",
                      s.codes[i], "\n");
    }
  }
  const char* name = "modelfs_registry_request_duration_seconds";
  absl::StrAppend(&out, "# HELP ", name,
                  " Time of one HTTP exchange with a registry, from sending the request to the "
                  "last byte of the answer, by registry and kind.\n# TYPE ",
                  name, " histogram\n");
  for (const RegistryMetrics::Series& s : all) {
    const std::string labels =
        absl::StrCat("registry=\"", LabelValue(s.registry), "\",kind=\"", s.kind, "\"");
    uint64_t cumulative = 0;
    for (size_t i = 0; i < RegistryMetrics::kBounds.size(); ++i) {
      cumulative += s.buckets[i];
      absl::StrAppend(&out, name, "_bucket{", labels, ",le=\"",
                      absl::StrFormat("%g", RegistryMetrics::kBounds[i]), "\"} ", cumulative, "\n");
    }
    cumulative += s.buckets[RegistryMetrics::kBounds.size()];
    absl::StrAppend(&out, name, "_bucket{", labels, ",le=\"+Inf\"} ", cumulative, "\n");
    absl::StrAppend(&out, name, "_sum{", labels, "} ", absl::StrFormat("%.6f", s.sum_seconds),
                    "\n");
    absl::StrAppend(&out, name, "_count{", labels, "} ", cumulative, "\n");
  }
}

void Counter(std::string& out, const char* name, const char* help, uint64_t v) {
  absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " counter\n", name, " ", v,
                  "\n");
}

void Gauge(std::string& out, const char* name, const char* help, uint64_t v) {
  absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " gauge\n", name, " ", v,
                  "\n");
}

MHD_Result Answer(void* cls, MHD_Connection* connection, const char* url, const char* method,
                  const char* /*version*/, const char* /*upload_data*/,
                  size_t* /*upload_data_size*/, void** /*con_cls*/) {
  auto* server = static_cast<MetricsServer*>(cls);
  unsigned status = MHD_HTTP_OK;
  std::string body;
  if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
    status = MHD_HTTP_METHOD_NOT_ALLOWED;
    body = "only GET\n";
  } else if (strcmp(url, "/metrics") != 0) {
    status = MHD_HTTP_NOT_FOUND;
    body = "modelfs-snapshotter: metrics are at /metrics\n";
  } else {
    body = server->Render();
  }
  MHD_Response* response =
      MHD_create_response_from_buffer(body.size(), body.data(), MHD_RESPMEM_MUST_COPY);
  MHD_add_response_header(response, "Content-Type",
                          status == MHD_HTTP_OK ? "text/plain; version=0.0.4; charset=utf-8"
                                                : "text/plain; charset=utf-8");
  MHD_Result r = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);
  return r;
}

}  // namespace

std::string RenderPrometheus(const DaemonCounters& c, const LatencyHistogram& reads) {
  std::string out;
  Counter(out, "modelfs_bytes_fetched_total", "Bytes received from registries.",
          c.cache.bytes_fetched);
  Counter(out, "modelfs_cache_range_requests_total",
          "Range requests the cache sent to registries (each retry counts).", c.cache.requests);
  Counter(out, "modelfs_cache_hits_total", "Chunks a read found verified in the cache.",
          c.cache.chunk_hits);
  Counter(out, "modelfs_cache_misses_total", "Chunks a read had to wait for.",
          c.cache.chunk_misses);
  Counter(out, "modelfs_verification_failures_total",
          "Chunks or layers whose digest did not match (never served).",
          c.cache.verification_failures);
  Counter(out, "modelfs_refetch_recoveries_total",
          "Chunks fetched again after a wrong answer that then verified.",
          c.cache.refetch_recoveries);
  Gauge(out, "modelfs_quarantined_layers", "Layers refused after a verification failure.",
        c.cache.quarantined_layers);
  Counter(out, "modelfs_bytes_served_total", "Bytes returned to readers.", c.cache.bytes_served);
  Counter(out, "modelfs_page_cache_dropped_bytes_total",
          "Cache-file bytes dropped from the page cache once served (the reader keeps its copy).",
          c.cache.page_cache_bytes_dropped);
  Gauge(out, "modelfs_cached_bytes", "Layer bytes held in the cache.", c.cache.cached_bytes);
  Gauge(out, "modelfs_cache_max_bytes",
        "The cache's configured bound (cache.max_size_gib) in bytes; 0 means unbounded.",
        c.cache_max_bytes);
  Gauge(out, "modelfs_cache_disk_full",
        "1 while the cache's disk is full: verified chunks are served from memory, not cached.",
        c.disk_full ? 1 : 0);
  Counter(out, "modelfs_sealed_layers_total",
          "Chunk-mode layers sealed (served by passthrough) once every chunk was verified.",
          c.cache.sealed_layers);
  Counter(out, "modelfs_audited_layers_total",
          "Sealed layers whose whole-layer audit matched their digest.", c.cache.audited_layers);
  Counter(out, "modelfs_scrubbed_bytes_total",
          "Bytes of sealed layers the background scrub read and hashed again.",
          c.cache.scrubbed_bytes);
  Counter(out, "modelfs_scrub_failures_total", "Sealed layers the scrub found changed on disk.",
          c.cache.scrub_failures);
  Counter(out, "modelfs_scrub_repairs_total",
          "Of them, layers put out of service and fetched again into a new data file.",
          c.cache.scrub_repairs);
  Gauge(out, "modelfs_fs_verity", "1 when the cache directory's filesystem supports fs-verity.",
        c.cache.fs_verity ? 1 : 0);
  Counter(out, "modelfs_evicted_layers_total", "Layers evicted to respect the size bound.",
          c.cache.evicted_layers);
  Gauge(out, "modelfs_active_models", "Models registered in the FUSE mount.", c.active_models);
  Counter(out, "modelfs_read_errors_total", "FUSE reads that returned an error.", c.read_errors);
  Counter(out, "modelfs_passthrough_opens_total",
          "Opens served by FUSE passthrough: the kernel reads the sealed cache file itself.",
          c.passthrough_opens);
  absl::StrAppend(&out,
                  "# HELP modelfs_remote_prepares_total Prepare calls for volume-image layers, "
                  "by outcome.\n# TYPE modelfs_remote_prepares_total counter\n",
                  "modelfs_remote_prepares_total{result=\"mounted\"} ", c.remote_mounted, "\n",
                  "modelfs_remote_prepares_total{result=\"fallback\"} ", c.remote_fallback, "\n",
                  "modelfs_remote_prepares_total{result=\"error\"} ", c.remote_error, "\n");
  absl::StrAppend(&out,
                  "# HELP modelfs_policy_refusals_total Image volumes the signature policy "
                  "refused, by reason.\n# TYPE modelfs_policy_refusals_total counter\n");
  // Every reason is listed, so a dashboard sees zeros rather than absent series.
  std::map<std::string, uint64_t> refusals = {
      {"no_signature", 0}, {"no_key_matched", 0},     {"identity_mismatch", 0}, {"bad_payload", 0},
      {"fetch_failed", 0}, {"rejected_by_policy", 0}, {"policy_unreadable", 0}};
  for (const auto& [reason, n] : c.policy_refusals) refusals[reason] = n;
  for (const auto& [reason, n] : refusals) {
    absl::StrAppend(&out, "modelfs_policy_refusals_total{reason=\"", reason, "\"} ", n, "\n");
  }
  absl::StrAppend(&out,
                  "# HELP modelfs_equivalence_refusals_total Image volumes require_equivalence "
                  "refused, by reason.\n# TYPE modelfs_equivalence_refusals_total counter\n");
  std::map<std::string, uint64_t> equivalence = {
      {"no_attestation", 0},   {"no_key_matched", 0},       {"bad_payload", 0},
      {"subject_mismatch", 0}, {"wrong_predicate_type", 0}, {"not_equivalent", 0},
      {"fetch_failed", 0}};
  for (const auto& [reason, n] : c.equivalence_refusals) equivalence[reason] = n;
  for (const auto& [reason, n] : equivalence) {
    absl::StrAppend(&out, "modelfs_equivalence_refusals_total{reason=\"", reason, "\"} ", n, "\n");
  }
  Counter(out, "modelfs_policy_evaluations_total",
          "Signature policy evaluations that asked a registry (kept verdicts excluded).",
          c.policy_evaluations);
  out += reads.Render("modelfs_read_latency_seconds",
                      "Time to answer one FUSE read request, cache hits included.");
  RenderRegistry(out, c.registry);
  if (!c.version.empty()) {
    absl::StrAppend(&out,
                    "# HELP modelfs_build_info The running daemon's version and the commit it "
                    "was built from.\n"
                    "# TYPE modelfs_build_info gauge\nmodelfs_build_info{version=\"",
                    LabelValue(c.version), "\",commit=\"",
                    LabelValue(c.commit.empty() ? "unknown" : c.commit), "\"} 1\n");
  }
  return out;
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& host, uint16_t port, std::function<std::string()> render) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* res = nullptr;
  std::string port_text = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res); rc != 0 || !res) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address ", host, ": ", gai_strerror(rc)));
  }
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  s->render_ = std::move(render);
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD;
  if (res->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  s->daemon_ = MHD_start_daemon(flags, port, nullptr, nullptr, &Answer, s.get(),
                                MHD_OPTION_SOCK_ADDR, res->ai_addr, MHD_OPTION_CONNECTION_TIMEOUT,
                                static_cast<unsigned>(10), MHD_OPTION_END);
  freeaddrinfo(res);
  if (s->daemon_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", host, ":", port, ": ", strerror(errno)));
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(s->daemon_, MHD_DAEMON_INFO_BIND_PORT);
  s->port_ = info ? info->port : port;
  return s;
}

MetricsServer::~MetricsServer() {
  if (daemon_) MHD_stop_daemon(daemon_);
}

}  // namespace modelfs::snapshotter
