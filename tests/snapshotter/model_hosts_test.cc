// model_hosts entries (model_hosts.h): their forms, what each allows, and the refusal a volume
// image gets for a repository none allows.
#include "snapshotter/policy/model_hosts.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs::snapshotter {
namespace {

using ::modelfs::testing::StatusIs;
using ::testing::HasSubstr;

constexpr char kVolume[] = "reg.test:5000/tenant-a/llama-volume@sha256:1111";
const RepositoryName kV{"reg.test:5000", "tenant-a/llama-volume"};
constexpr char kModel[] = "sha256:2222";

TEST(ModelHostEntryTest, AHostAloneIsValid) { EXPECT_OK(CheckModelHostEntry("reg.test:5000")); }

TEST(ModelHostEntryTest, AHostWithARepositoryIsValid) {
  EXPECT_OK(CheckModelHostEntry("reg.test:5000/tenant-b/llama"));
}

TEST(ModelHostEntryTest, AHostWithARepositoryPrefixIsValid) {
  EXPECT_OK(CheckModelHostEntry("reg.test:5000/tenant-b/*"));
}

TEST(ModelHostEntryTest, AUrlIsInvalidAndNamed) {
  EXPECT_THAT(CheckModelHostEntry("https://reg.test"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model_hosts \"https://reg.test\": a URL")));
}

TEST(ModelHostEntryTest, AWildcardForTheWholeHostPathIsInvalid) {
  EXPECT_THAT(CheckModelHostEntry("reg.test/*"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ModelHostEntryTest, AWildcardInsideAPathElementIsInvalid) {
  EXPECT_THAT(CheckModelHostEntry("reg.test/tenant-*/m"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ModelHostEntryTest, AnEmptyPathElementIsInvalid) {
  EXPECT_THAT(CheckModelHostEntry("reg.test/tenant-b//m"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty path element")));
}

TEST(ModelHostEntryTest, AnEmptyEntryIsInvalid) {
  EXPECT_THAT(CheckModelHostEntry(""), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ModelHostAllowsTest, AHostAllowsEveryRepositoryThere) {
  EXPECT_TRUE(ModelHostAllows("reg.test:5000", "reg.test:5000", "tenant-b/llama"));
}

TEST(ModelHostAllowsTest, AHostDoesNotAllowTheSameHostOnAnotherPort) {
  EXPECT_FALSE(ModelHostAllows("reg.test:5000", "reg.test", "tenant-b/llama"));
}

TEST(ModelHostAllowsTest, APrefixAllowsARepositoryUnderIt) {
  EXPECT_TRUE(ModelHostAllows("reg.test/tenant-b/*", "reg.test", "tenant-b/llama"));
}

TEST(ModelHostAllowsTest, APrefixAllowsARepositoryDeeperUnderIt) {
  EXPECT_TRUE(ModelHostAllows("reg.test/tenant-b/*", "reg.test", "tenant-b/team/llama"));
}

TEST(ModelHostAllowsTest, APrefixDoesNotAllowARepositoryThatOnlyStartsWithItsName) {
  EXPECT_FALSE(ModelHostAllows("reg.test/tenant-b/*", "reg.test", "tenant-bb/llama"));
}

TEST(ModelHostAllowsTest, APrefixDoesNotAllowTheRepositoryNamedLikeIt) {
  EXPECT_FALSE(ModelHostAllows("reg.test/tenant-b/*", "reg.test", "tenant-b"));
}

TEST(ModelHostAllowsTest, APrefixDoesNotAllowItOnAnotherRegistry) {
  EXPECT_FALSE(ModelHostAllows("reg.test/tenant-b/*", "other.test", "tenant-b/llama"));
}

TEST(ModelHostAllowsTest, ARepositoryAllowsExactlyThatRepository) {
  EXPECT_TRUE(ModelHostAllows("reg.test/tenant-b/llama", "reg.test", "tenant-b/llama"));
  EXPECT_FALSE(ModelHostAllows("reg.test/tenant-b/llama", "reg.test", "tenant-b/llama2"));
}

TEST(CheckModelHostTest, TheVolumeImagesOwnRepositoryNeedsNoEntry) {
  EXPECT_OK(CheckModelHost({}, kVolume, kV, kModel, kV));
}

// The confused deputy: the node's credentials read tenant-b, and tenant-a's volume image must
// not borrow them.
TEST(CheckModelHostTest, AnotherRepositoryOfTheSameRegistryIsRefusedByDefault) {
  EXPECT_THAT(CheckModelHost({}, kVolume, kV, kModel, {"reg.test:5000", "tenant-b/llama"}),
              StatusIs(absl::StatusCode::kPermissionDenied));
}

TEST(CheckModelHostTest, TheRefusalNamesBothRepositoriesAndTheLineToAdd) {
  EXPECT_THAT(
      CheckModelHost({}, kVolume, kV, kModel, {"reg.test:5000", "tenant-b/llama"}).message(),
      "volume image reg.test:5000/tenant-a/llama-volume@sha256:1111 in repository "
      "reg.test:5000/tenant-a/llama-volume names its model sha256:2222 in repository "
      "reg.test:5000/tenant-b/llama, where this node does not follow volume images (model_hosts "
      "allows nothing beyond a volume image's own repository there); to allow it, add it to "
      "model_hosts in snapshotter.toml: model_hosts = [\"reg.test:5000/tenant-b/llama\"]");
}

TEST(CheckModelHostTest, APrefixEntryAllowsAnotherTenantsRepository) {
  EXPECT_OK(CheckModelHost({"reg.test:5000/tenant-b/*"}, kVolume, kV, kModel,
                           {"reg.test:5000", "tenant-b/llama"}));
}

TEST(CheckModelHostTest, AHostEntryKeepsItsOldMeaningOfAnyRepositoryThere) {
  EXPECT_OK(CheckModelHost({"models.test"}, kVolume, kV, kModel, {"models.test", "any/thing"}));
}

TEST(CheckModelHostTest, AnotherRegistryNoEntryNamesIsRefused) {
  EXPECT_THAT(CheckModelHost({"reg.test:5000/tenant-b/*"}, kVolume, kV, kModel,
                             {"models.test", "tenant-b/llama"}),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("model_hosts = [\"models.test/tenant-b/llama\"]")));
}

}  // namespace
}  // namespace modelfs::snapshotter
