#include "cmd/modelfs-snapshotter/metrics.h"

#include <curl/curl.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs::snapshotter {
namespace {

using ::testing::HasSubstr;

TEST(LatencyHistogramTest, BucketsAreCumulativeAndCountIncludesOverflow) {
  LatencyHistogram h;
  h.Observe(absl::Microseconds(300));  // <= 0.0005
  h.Observe(absl::Milliseconds(3));    // <= 0.005
  h.Observe(absl::Seconds(60));        // +Inf only
  std::string text = h.Render("x_seconds", "help");
  EXPECT_THAT(text, HasSubstr("x_seconds_bucket{le=\"0.0005\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("x_seconds_bucket{le=\"0.0025\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("x_seconds_bucket{le=\"0.005\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("x_seconds_bucket{le=\"10\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("x_seconds_bucket{le=\"+Inf\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("x_seconds_sum 60.003300000\n"));
  EXPECT_THAT(text, HasSubstr("x_seconds_count 3\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE x_seconds histogram\n"));
}

TEST(RenderPrometheusTest, EveryDocumentedMetricIsPresentWithItsValue) {
  DaemonCounters c;
  c.cache.bytes_fetched = 1234;
  c.cache.requests = 5;
  c.cache.chunk_hits = 7;
  c.cache.chunk_misses = 3;
  c.cache.verification_failures = 1;
  c.cache.quarantined_layers = 1;
  c.active_models = 2;
  c.remote_mounted = 4;
  c.remote_fallback = 1;
  c.passthrough_opens = 9;
  LatencyHistogram h;
  std::string text = RenderPrometheus(c, h);
  EXPECT_THAT(text, HasSubstr("\nmodelfs_bytes_fetched_total 1234\n"));
  EXPECT_THAT(text, HasSubstr("\nmodelfs_cache_range_requests_total 5\n"));
  EXPECT_THAT(text, HasSubstr("\nmodelfs_cache_hits_total 7\n"));
  EXPECT_THAT(text, HasSubstr("\nmodelfs_cache_misses_total 3\n"));
  EXPECT_THAT(text, HasSubstr("\nmodelfs_verification_failures_total 1\n"));
  EXPECT_THAT(text, HasSubstr("\nmodelfs_quarantined_layers 1\n"));
  EXPECT_THAT(text, HasSubstr("\nmodelfs_active_models 2\n"));
  EXPECT_THAT(text, HasSubstr("modelfs_remote_prepares_total{result=\"mounted\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("modelfs_remote_prepares_total{result=\"fallback\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("modelfs_read_latency_seconds_count 0\n"));
  EXPECT_THAT(text, HasSubstr("\nmodelfs_passthrough_opens_total 9\n"));
  EXPECT_THAT(text, HasSubstr("\nmodelfs_cache_max_bytes 0\n"));  // unbounded
  EXPECT_THAT(text, HasSubstr("\nmodelfs_cache_disk_full 0\n"));
}

// The alert on a nearly full cache compares with the bound the daemon exports, not a constant.
TEST(RenderPrometheusTest, TheCacheBoundAndAFullDiskAreGauges) {
  DaemonCounters c;
  c.cache_max_bytes = 200ull << 30;
  c.disk_full = true;
  LatencyHistogram h;
  std::string text = RenderPrometheus(c, h);
  EXPECT_THAT(text, HasSubstr("# TYPE modelfs_cache_max_bytes gauge\nmodelfs_cache_max_bytes "
                              "214748364800\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE modelfs_cache_disk_full gauge\nmodelfs_cache_disk_full 1\n"));
}

TEST(RenderPrometheusTest, RefetchRecoveriesAreACounterOfTheirOwn) {
  DaemonCounters c;
  c.cache.verification_failures = 3;
  c.cache.refetch_recoveries = 2;
  LatencyHistogram h;
  std::string text = RenderPrometheus(c, h);
  EXPECT_THAT(text, HasSubstr("# TYPE modelfs_refetch_recoveries_total counter\n"));
  EXPECT_THAT(text, HasSubstr("\nmodelfs_refetch_recoveries_total 2\n"));
  EXPECT_THAT(text, HasSubstr("\nmodelfs_verification_failures_total 3\n"));
}

TEST(RenderPrometheusTest, PolicyRefusalsAreCountedByReasonWithEveryReasonPresent) {
  DaemonCounters c;
  c.policy_refusals = {{"no_signature", 2}, {"no_key_matched", 1}};
  c.policy_evaluations = 5;
  LatencyHistogram h;
  std::string text = RenderPrometheus(c, h);
  EXPECT_THAT(text, HasSubstr("modelfs_policy_refusals_total{reason=\"no_signature\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("modelfs_policy_refusals_total{reason=\"no_key_matched\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("modelfs_policy_refusals_total{reason=\"fetch_failed\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("modelfs_policy_refusals_total{reason=\"policy_unreadable\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("\nmodelfs_policy_evaluations_total 5\n"));
}

TEST(RenderPrometheusTest, EquivalenceRefusalsAreCountedByReasonWithEveryReasonPresent) {
  DaemonCounters c;
  c.equivalence_refusals = {{"no_attestation", 3}, {"no_key_matched", 1}};
  LatencyHistogram h;
  std::string text = RenderPrometheus(c, h);
  EXPECT_THAT(text, HasSubstr("modelfs_equivalence_refusals_total{reason=\"no_attestation\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("modelfs_equivalence_refusals_total{reason=\"no_key_matched\"} 1\n"));
  for (const char* zero : {"bad_payload", "subject_mismatch", "wrong_predicate_type",
                           "not_equivalent", "fetch_failed"}) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("modelfs_equivalence_refusals_total{reason=\"", zero,
                                             "\"} 0\n")));
  }
}

size_t Append(char* p, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(p, size * n);
  return size * n;
}

RegistryRequestRecord Record(std::string_view registry, RegistryRequestKind kind, long status,
                             absl::Duration elapsed) {
  return RegistryRequestRecord{registry, kind, status, elapsed};
}

TEST(RegistryMetricsTest, RequestsAreCountedByRegistryKindAndStatusClassWithEveryCodePresent) {
  RegistryMetrics m;
  m.OnRequest(Record("reg:5000", RegistryRequestKind::kBlob, 206, absl::Milliseconds(3)));
  m.OnRequest(Record("reg:5000", RegistryRequestKind::kBlob, 503, absl::Milliseconds(3)));
  m.OnRequest(Record("reg:5000", RegistryRequestKind::kBlob, 0, absl::Seconds(61)));
  m.OnRequest(Record("reg:5000", RegistryRequestKind::kToken, 200, absl::Milliseconds(1)));
  m.OnRequest(Record("ghcr.io", RegistryRequestKind::kManifest, 404, absl::Milliseconds(40)));
  DaemonCounters c;
  c.registry = m.Snapshot();
  const std::string text = RenderPrometheus(c, LatencyHistogram());
  EXPECT_THAT(text, HasSubstr("# TYPE modelfs_registry_requests_total counter\n"
                              "modelfs_registry_requests_total{registry=\"ghcr.io\",kind="
                              "\"manifest\",code=\"2xx\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("modelfs_registry_requests_total{registry=\"ghcr.io\",kind="
                              "\"manifest\",code=\"4xx\"} 1\n"));
  for (const char* line : {"{registry=\"reg:5000\",kind=\"blob\",code=\"2xx\"} 1\n",
                           "{registry=\"reg:5000\",kind=\"blob\",code=\"3xx\"} 0\n",
                           "{registry=\"reg:5000\",kind=\"blob\",code=\"5xx\"} 1\n",
                           "{registry=\"reg:5000\",kind=\"blob\",code=\"error\"} 1\n",
                           "{registry=\"reg:5000\",kind=\"token\",code=\"2xx\"} 1\n"}) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("\nmodelfs_registry_requests_total", line)));
  }
}

TEST(RegistryMetricsTest, LatencyIsAHistogramPerRegistryAndKind) {
  RegistryMetrics m;
  m.OnRequest(Record("reg:5000", RegistryRequestKind::kBlob, 206, absl::Milliseconds(3)));
  m.OnRequest(Record("reg:5000", RegistryRequestKind::kBlob, 206, absl::Milliseconds(700)));
  m.OnRequest(Record("reg:5000", RegistryRequestKind::kBlob, 0, absl::Seconds(61)));
  DaemonCounters c;
  c.registry = m.Snapshot();
  const std::string text = RenderPrometheus(c, LatencyHistogram());
  const std::string n = "modelfs_registry_request_duration_seconds";
  EXPECT_THAT(text, HasSubstr("# TYPE " + n + " histogram\n"));
  EXPECT_THAT(text, HasSubstr(n + "_bucket{registry=\"reg:5000\",kind=\"blob\",le=\"0.005\"} 1\n"));
  EXPECT_THAT(text, HasSubstr(n + "_bucket{registry=\"reg:5000\",kind=\"blob\",le=\"0.5\"} 1\n"));
  EXPECT_THAT(text, HasSubstr(n + "_bucket{registry=\"reg:5000\",kind=\"blob\",le=\"1\"} 2\n"));
  EXPECT_THAT(text, HasSubstr(n + "_bucket{registry=\"reg:5000\",kind=\"blob\",le=\"60\"} 2\n"));
  EXPECT_THAT(text, HasSubstr(n + "_bucket{registry=\"reg:5000\",kind=\"blob\",le=\"+Inf\"} 3\n"));
  EXPECT_THAT(text, HasSubstr(n + "_sum{registry=\"reg:5000\",kind=\"blob\"} 61.703000\n"));
  EXPECT_THAT(text, HasSubstr(n + "_count{registry=\"reg:5000\",kind=\"blob\"} 3\n"));
}

TEST(RegistryMetricsTest, RegistriesBeyondTheBoundAreCountedAsOther) {
  RegistryMetrics m;
  for (size_t i = 0; i < RegistryMetrics::kMaxRegistries + 5; ++i) {
    m.OnRequest(Record(absl::StrCat("r", i, ".example"), RegistryRequestKind::kBlob, 200,
                       absl::Milliseconds(1)));
  }
  std::vector<RegistryMetrics::Series> s = m.Snapshot();
  ASSERT_EQ(s.size(), RegistryMetrics::kMaxRegistries + 1);
  uint64_t other = 0;
  for (const auto& series : s) {
    if (series.registry == "other") other = series.count;
  }
  EXPECT_EQ(other, 5u);
}

TEST(RegistryMetricsTest, LabelValuesAreEscaped) {
  RegistryMetrics m;
  m.OnRequest(Record("a\"b\\c\nd", RegistryRequestKind::kOther, 200, absl::Milliseconds(1)));
  DaemonCounters c;
  c.registry = m.Snapshot();
  EXPECT_THAT(RenderPrometheus(c, LatencyHistogram()),
              HasSubstr("{registry=\"a\\\"b\\\\c\\nd\",kind=\"other\",code=\"2xx\"} 1\n"));
}

TEST(RenderPrometheusTest, BuildInfoCarriesVersionAndCommit) {
  DaemonCounters c;
  c.version = "1.2.3";
  c.commit = "3d77339abcde";
  EXPECT_THAT(RenderPrometheus(c, LatencyHistogram()),
              HasSubstr("\nmodelfs_build_info{version=\"1.2.3\",commit=\"3d77339abcde\"} 1\n"));
  c.commit = "";
  EXPECT_THAT(RenderPrometheus(c, LatencyHistogram()),
              HasSubstr("\nmodelfs_build_info{version=\"1.2.3\",commit=\"unknown\"} 1\n"));
}

TEST(MetricsServerTest, ServesTheRenderedTextAtSlashMetricsOnLoopback) {
  ASSERT_OK_AND_ASSIGN(auto server,
                       MetricsServer::Start("127.0.0.1", 0, [] { return "modelfs_up 1\n"; }));
  ASSERT_NE(server->port(), 0);
  CURL* curl = curl_easy_init();
  std::string body;
  std::string url = absl::StrCat("http://127.0.0.1:", server->port(), "/metrics");
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &Append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  ASSERT_EQ(curl_easy_perform(curl), CURLE_OK);
  long code = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
  curl_easy_cleanup(curl);
  EXPECT_EQ(code, 200);
  EXPECT_EQ(body, "modelfs_up 1\n");
}

TEST(MetricsServerTest, AnUnknownHostIsInvalidArgument) {
  EXPECT_THAT(MetricsServer::Start("no-such-host.invalid", 0, [] { return ""; }).status(),
              modelfs::testing::StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace modelfs::snapshotter
