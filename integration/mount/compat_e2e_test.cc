// On-disk compatibility with an earlier release (docs/install.md, "Upgrades and rollbacks").
// tests/compat/fixtures/<commit>/ holds what that release wrote (tests/compat/make_fixture.sh):
// a registry's storage with two models (M plus V, raw layers and gzip tar layers) pushed by its
// `modelfs push`, and the blob cache and chunk journal its `modelfs mount` left after reading
// both whole. This tree must serve both models from that cache, byte for byte, fetching no
// weight bytes; and what it then writes to the cache must keep every table and column the earlier
// release reads (a rollback opens it).
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/sqlite/sqlite.h"
#include "gtest/gtest.h"
#include "integration/mount/mount_test_env.h"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;

// The release before this wave of changes (the tree at 29b8ca6).
constexpr char kFixture[] = MODELFS_COMPAT_FIXTURES "/29b8ca6";

// table -> its columns, of the SQLite database at `path`.
std::map<std::string, std::set<std::string>> Schema(const std::string& path) {
  std::map<std::string, std::set<std::string>> out;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << "cannot open " << path;
    sqlite3_close(db);
    return out;
  }
  std::vector<std::string> tables;
  {
    sqlite::Statement q(db, "SELECT name FROM sqlite_master WHERE type = 'table'");
    for (auto row = q.Step(); row.ok() && *row; row = q.Step()) tables.push_back(q.Text(0));
  }
  for (const std::string& t : tables) {
    sqlite::Statement q(db, absl::StrCat("PRAGMA table_info(", t, ")"));
    for (auto row = q.Step(); row.ok() && *row; row = q.Step()) out[t].insert(q.Text(1));
  }
  {
    sqlite::Statement q(db, "SELECT value FROM meta WHERE key = 'format_version'");
    auto row = q.Step();
    if (row.ok() && *row) out["meta:format_version=" + q.Text(0)];
  }
  sqlite3_close(db);
  return out;
}

class CompatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kFixture)) FAIL() << "fixture missing: " << kFixture;
    if (geteuid() != 0 || !fs::exists("/dev/fuse")) {
      SKIP_OR_FAIL_IF_UNAVAILABLE("needs root and /dev/fuse");
    }
    BecomeSubreaper();
    RegistryFixtureOptions o;
    o.seed_storage_dir = std::string(kFixture) + "/registry";
    ASSERT_OK_AND_ASSIGN(registry_, RegistryFixture::Start(o));
    cache_ = tmp_.Join("cache").string();
    fs::copy(std::string(kFixture) + "/cache", cache_, fs::copy_options::recursive);
    std::ifstream refs(std::string(kFixture) + "/refs.txt");
    for (std::string name, ref; refs >> name >> ref;) refs_[name] = ref;
    std::ifstream(std::string(kFixture) + "/origin.txt") >> origin_;
    ASSERT_FALSE(origin_.empty());
    // V names M on the registry it was pushed to: send that host to this test's registry.
    hosts_dir_ = tmp_.Join("certs.d").string();
    fs::create_directories(fs::path(hosts_dir_) / origin_);
    std::ofstream(fs::path(hosts_dir_) / origin_ / "hosts.toml")
        << "server = \"http://" << registry_->host_port() << "\"\n";
    std::ifstream sums(std::string(kFixture) + "/files.sha256");
    for (std::string hex, path; sums >> hex >> path;) want_[path] = "sha256:" + hex;
    ASSERT_EQ(refs_.size(), 2u);
    ASSERT_FALSE(want_.empty());
  }

  TempDir tmp_;
  std::unique_ptr<RegistryFixture> registry_;
  std::string cache_;
  std::string origin_;     // host:port the fixture's registry had when V was pushed
  std::string hosts_dir_;  // certs.d mapping origin_ to registry_
  std::map<std::string, std::string> refs_;  // "raw" -> "compat/raw@sha256:..."
  std::map<std::string, std::string> want_;  // "raw/<path>" -> "sha256:..."
};

TEST_F(CompatTest, ServesTheModelsFromTheCacheAnEarlierReleaseWroteFetchingNoWeightBytes) {
  std::map<std::string, std::string> got;
  for (const auto& [name, ref] : refs_) {
    const std::string dir = tmp_.Join("mnt-" + name).string();
    fs::create_directories(dir);
    MountOptions o;
    o.cache_dir = cache_;
    o.hosts_dir = hosts_dir_;
    ASSERT_OK_AND_ASSIGN(auto m, ModelMount::Start(absl::StrCat(origin_, "/", ref), dir, o));
    for (const auto& [path, digest] : DescribeFiles(dir)) {
      if (fs::path(path).filename() == ".modelinfo.json") continue;
      got[absl::StrCat(name, "/", path)] = digest;
    }
    ASSERT_OK_AND_ASSIGN(nlohmann::json stats, m->FreshStats());
    EXPECT_EQ(stats.value("bytes_fetched", -1), 0) << name << ": " << stats.dump();
    EXPECT_EQ(stats.value("verification_failures", -1), 0) << name;
    EXPECT_EQ(stats.value("quarantined_layers", -1), 0) << name;
    ASSERT_OK(m->Unmount());
  }
  EXPECT_EQ(got, want_);
}

TEST_F(CompatTest, WhatThisTreeWritesToTheCacheKeepsWhatTheEarlierReleaseReads) {
  const auto old_schema = Schema(std::string(kFixture) + "/cache/cache.db");
  ASSERT_TRUE(old_schema.count("meta:format_version=1")) << "fixture's format_version";
  // This tree opens the cache, serves a model and closes it (it migrates what it must).
  const auto& [name, ref] = *refs_.begin();
  const std::string dir = tmp_.Join("mnt").string();
  fs::create_directories(dir);
  MountOptions o;
  o.cache_dir = cache_;
  o.hosts_dir = hosts_dir_;
  ASSERT_OK_AND_ASSIGN(auto m, ModelMount::Start(absl::StrCat(origin_, "/", ref), dir, o));
  EXPECT_FALSE(DescribeFiles(dir).empty());
  ASSERT_OK(m->Unmount());
  const auto new_schema = Schema(cache_ + "/cache.db");
  for (const auto& [table, columns] : old_schema) {
    ASSERT_TRUE(new_schema.count(table)) << "table " << table << " is gone";
    for (const std::string& c : columns) {
      EXPECT_TRUE(new_schema.at(table).count(c)) << "column " << table << "." << c << " is gone";
    }
  }
}

}  // namespace
}  // namespace modelfs::testing
