// DaemonLog: the level filter, the format of the stderr line, and when the journal is used.
#include "cmd/modelfs-snapshotter/daemon_log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "nlohmann/json.hpp"

namespace modelfs::snapshotter {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Written(const DaemonLog& log, const log::Event& e) {
  ::testing::internal::CaptureStderr();
  log.Write(e);
  return ::testing::internal::GetCapturedStderr();
}

TEST(DaemonLogTest, EventsBelowTheLevelAreDropped) {
  DaemonLog log(DaemonLogOptions{.min_level = log::Level::kWarn});
  EXPECT_EQ(Written(log, log::Info("cache", "evicted layer")), "");
  EXPECT_EQ(Written(log, log::Debug("service", "Prepare")), "");
  EXPECT_THAT(Written(log, log::Warn("cache", "fetch failed")),
              HasSubstr(" level=warn component=cache msg=\"fetch failed\"\n"));
  EXPECT_FALSE(log.Enabled(log::Level::kInfo));
  EXPECT_TRUE(log.Enabled(log::Level::kError));
}

TEST(DaemonLogTest, LogfmtIsOneLineStartingWithTheTime) {
  DaemonLog log(DaemonLogOptions{});
  const std::string line =
      Written(log, log::Error("cache", "quarantined layer").Field("digest", "sha256:ab"));
  EXPECT_THAT(line, StartsWith("time=20"));
  EXPECT_THAT(line, HasSubstr(" level=error component=cache msg=\"quarantined layer\" "
                              "digest=sha256:ab\n"));
  EXPECT_EQ(line.find('\n'), line.size() - 1);
}

TEST(DaemonLogTest, JsonIsOneObjectPerLine) {
  DaemonLog log(DaemonLogOptions{.format = log::Format::kJson});
  const std::string line = Written(log, log::Warn("policy", "refused").Field("reason", "x\ny"));
  ASSERT_EQ(line.back(), '\n');
  nlohmann::json j = nlohmann::json::parse(line.substr(0, line.size() - 1));
  EXPECT_EQ(j["level"], "warn");
  EXPECT_EQ(j["component"], "policy");
  EXPECT_EQ(j["msg"], "refused");
  EXPECT_EQ(j["reason"], "x\\ny");
}

TEST(DaemonLogTest, AutoUsesTheJournalOnlyWhenStderrIsTheStreamSystemdNamed) {
  EXPECT_TRUE(JournalWanted("auto", "8:1234", 8, 1234));
  EXPECT_FALSE(JournalWanted("auto", "8:1234", 8, 99));  // stderr redirected to a file
  EXPECT_FALSE(JournalWanted("auto", nullptr, 8, 1234));
  EXPECT_FALSE(JournalWanted("auto", "garbage", 8, 1234));
  EXPECT_TRUE(JournalWanted("on", nullptr, 0, 0));
  EXPECT_FALSE(JournalWanted("off", "8:1234", 8, 1234));
}

}  // namespace
}  // namespace modelfs::snapshotter
