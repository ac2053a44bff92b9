// The metrics the daemon exports against what the docs and the sample alerts say: every series
// RenderPrometheus writes is in the table of docs/snapshotter.md, every name in that table is
// exported, and every alert in packaging/modelfs-alerts.rules.yml names only exported series.
// MODELFS_DOCS_SOURCE_DIR (a compile definition) is the source tree the files are read from.
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cmd/modelfs-snapshotter/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace modelfs::snapshotter {
namespace {

std::string ReadSourceFile(const std::string& rel) {
  const std::string path = std::string(MODELFS_DOCS_SOURCE_DIR) + "/" + rel;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The family names of a Prometheus text page, from its "# TYPE <name> <type>" lines.
std::set<std::string> ExportedFamilies() {
  DaemonCounters c;
  c.version = "0.0.0-test";
  LatencyHistogram h;
  std::set<std::string> names;
  for (absl::string_view line : absl::StrSplit(RenderPrometheus(c, h), '\n')) {
    if (!absl::ConsumePrefix(&line, "# TYPE ")) continue;
    std::vector<std::string> parts = absl::StrSplit(line, ' ');
    names.insert(parts[0]);
  }
  return names;
}

bool IsNameChar(char ch) {
  return (ch >= 'a' && ch <= 'z') || ch == '_' || (ch >= '0' && ch <= '9');
}

// Every `modelfs_...` name in the first column of the table under "## Metrics" in snapshotter.md
// (labels such as {result} dropped).
std::set<std::string> DocumentedFamilies() {
  const std::string doc = ReadSourceFile("docs/snapshotter.md");
  std::set<std::string> names;
  bool in_section = false;
  for (absl::string_view line : absl::StrSplit(doc, '\n')) {
    if (absl::StartsWith(line, "## ")) in_section = (line == "## Metrics");
    if (!in_section || !absl::ConsumePrefix(&line, "| `modelfs_")) continue;
    size_t n = 0;
    while (n < line.size() && IsNameChar(line[n])) ++n;
    names.insert("modelfs_" + std::string(line.substr(0, n)));
  }
  return names;
}

// Every modelfs_ name in the `expr:` lines of the rules file, histogram suffixes dropped.
std::set<std::string> AlertedFamilies(const std::string& rules) {
  std::set<std::string> names;
  for (absl::string_view line : absl::StrSplit(rules, '\n')) {
    line = absl::StripLeadingAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&line, "expr:")) continue;
    for (size_t i = line.find("modelfs_"); i != absl::string_view::npos;
         i = line.find("modelfs_", i)) {
      size_t n = i;
      while (n < line.size() && IsNameChar(line[n])) ++n;
      std::string name(line.substr(i, n - i));
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        if (absl::EndsWith(name, suffix) && (name.find("latency") != std::string::npos ||
                                             name.find("duration") != std::string::npos)) {
          name.resize(name.size() - std::string(suffix).size());
        }
      }
      names.insert(name);
      i = n;
    }
  }
  return names;
}

TEST(MetricsDocsTest, EveryExportedMetricIsDocumentedInSnapshotterMd) {
  std::set<std::string> documented = DocumentedFamilies();
  ASSERT_FALSE(documented.empty()) << "no metrics table under \"## Metrics\" in snapshotter.md";
  for (const std::string& name : ExportedFamilies()) {
    EXPECT_TRUE(documented.count(name))
        << name << " is exported but missing from the metrics table of docs/snapshotter.md";
  }
}

TEST(MetricsDocsTest, EveryDocumentedMetricIsExported) {
  std::set<std::string> exported = ExportedFamilies();
  for (const std::string& name : DocumentedFamilies()) {
    EXPECT_TRUE(exported.count(name)) << name << " is documented but not exported";
  }
}

TEST(MetricsDocsTest, EverySampleAlertNamesOnlyExportedMetrics) {
  const std::string rules = ReadSourceFile("packaging/modelfs-alerts.rules.yml");
  std::set<std::string> alerted = AlertedFamilies(rules);
  ASSERT_FALSE(alerted.empty()) << "no expr: lines in packaging/modelfs-alerts.rules.yml";
  std::set<std::string> exported = ExportedFamilies();
  for (const std::string& name : alerted) {
    EXPECT_TRUE(exported.count(name)) << "an alert names " << name << ", which is not exported";
  }
}

TEST(MetricsDocsTest, TheSampleAlertsCoverWhatTheDocsPromise) {
  const std::string rules = ReadSourceFile("packaging/modelfs-alerts.rules.yml");
  for (const char* alert :
       {"ModelfsVerificationFailures", "ModelfsLayerQuarantined", "ModelfsRemotePrepareFallback",
        "ModelfsPolicyRefusals", "ModelfsCacheNearlyFull", "ModelfsReadErrors"}) {
    EXPECT_TRUE(absl::StrContains(rules, std::string("alert: ") + alert)) << alert;
  }
}

TEST(MetricsDocsTest, BuildInfoCarriesTheVersion) {
  DaemonCounters c;
  c.version = "1.2.3";
  LatencyHistogram h;
  EXPECT_THAT(
      RenderPrometheus(c, h),
      ::testing::HasSubstr("\nmodelfs_build_info{version=\"1.2.3\",commit=\"unknown\"} 1\n"));
}

}  // namespace
}  // namespace modelfs::snapshotter
