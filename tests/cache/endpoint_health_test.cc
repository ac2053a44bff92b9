// EndpointHealth's rule with explicit times: who gets a shortened read deadline, and when.
#include "core/cache/endpoint_health.h"

#include <gtest/gtest.h>

namespace modelfs {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'000'000);
const absl::Duration kDeadline = absl::Seconds(30);

TEST(EndpointHealthTest, AnEndpointNeverTimedOutGetsTheFullDeadline) {
  EndpointHealth h;
  EXPECT_EQ(h.ReadDeadline("reg-a", kT0, kDeadline), kT0 + kDeadline);
}

TEST(EndpointHealthTest, ReadsWithinTwoSecondsOfATimeoutWaitAtMostOneSecond) {
  EndpointHealth h;
  EXPECT_TRUE(h.RecordTimeout("reg-a", kT0));
  const absl::Time t = kT0 + absl::Milliseconds(1999);
  EXPECT_EQ(h.ReadDeadline("reg-a", t, kDeadline), t + absl::Seconds(1));
}

TEST(EndpointHealthTest, TheWindowEndsTwoSecondsAfterTheTimeout) {
  EndpointHealth h;
  h.RecordTimeout("reg-a", kT0);
  const absl::Time t = kT0 + absl::Seconds(2);
  EXPECT_EQ(h.ReadDeadline("reg-a", t, kDeadline), t + kDeadline);
}

TEST(EndpointHealthTest, ATimeoutOfOneEndpointLeavesAnotherAlone) {
  EndpointHealth h;
  h.RecordTimeout("reg-a", kT0);
  EXPECT_EQ(h.ReadDeadline("reg-b", kT0, kDeadline), kT0 + kDeadline);
}

TEST(EndpointHealthTest, TheFirstSuccessClosesTheWindowAndIsReportedOnce) {
  EndpointHealth h;
  h.RecordTimeout("reg-a", kT0);
  EXPECT_TRUE(h.RecordSuccess("reg-a"));
  EXPECT_FALSE(h.RecordSuccess("reg-a"));
  EXPECT_EQ(h.ReadDeadline("reg-a", kT0, kDeadline), kT0 + kDeadline);
}

TEST(EndpointHealthTest, OnlyTheFirstTimeoutOfAnOutageIsReported) {
  EndpointHealth h;
  EXPECT_TRUE(h.RecordTimeout("reg-a", kT0));
  EXPECT_FALSE(h.RecordTimeout("reg-a", kT0 + kDeadline));
}

TEST(EndpointHealthTest, AReadDeadlineShorterThanTheShortWaitIsKept) {
  EndpointHealth h;
  h.RecordTimeout("reg-a", kT0);
  EXPECT_EQ(h.ReadDeadline("reg-a", kT0, absl::Milliseconds(100)), kT0 + absl::Milliseconds(100));
}

}  // namespace
}  // namespace modelfs
