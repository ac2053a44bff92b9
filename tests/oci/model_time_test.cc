// The time a mounted model shows: M's config createdAt, else M's created annotation, else V's,
// else the epoch; malformed dates are passed over.
#include "core/oci/model_time.h"

#include <gtest/gtest.h>

#include "core/oci/media_types.h"

namespace modelfs {
namespace {

constexpr int64_t k2025_02_10_08 = 1739174400;  // 2025-02-10T08:00:00Z

Manifest WithCreated(const std::string& created) {
  Manifest m;
  m.annotations[std::string(kAnnotationCreated)] = created;
  return m;
}

ModelPackConfig ConfigCreated(const std::string& created) {
  ModelPackConfig c;
  c.descriptor.created_at = created;
  return c;
}

TEST(ParseRfc3339SecondsTest, UtcWithFractionDropsTheFraction) {
  EXPECT_EQ(ParseRfc3339Seconds("2025-02-10T08:00:00.123Z"), k2025_02_10_08);
}

TEST(ParseRfc3339SecondsTest, OffsetIsAppliedToGetUtc) {
  EXPECT_EQ(ParseRfc3339Seconds("2025-02-10T09:30:00+01:30"), k2025_02_10_08);
}

TEST(ParseRfc3339SecondsTest, DateWithoutTimeDoesNotParse) {
  EXPECT_EQ(ParseRfc3339Seconds("2025-02-10"), std::nullopt);
}

TEST(ModelMtimeSecondsTest, ConfigCreatedAtComesFirst) {
  ModelPackConfig c = ConfigCreated("2025-02-10T08:00:00Z");
  Manifest m = WithCreated("2020-01-01T00:00:00Z");
  Manifest v = WithCreated("2021-01-01T00:00:00Z");
  EXPECT_EQ(ModelMtimeSeconds(&c, m, &v), k2025_02_10_08);
}

TEST(ModelMtimeSecondsTest, ManifestAnnotationWhenTheConfigHasNoTime) {
  ModelPackConfig c;
  Manifest m = WithCreated("2025-02-10T08:00:00Z");
  Manifest v = WithCreated("2021-01-01T00:00:00Z");
  EXPECT_EQ(ModelMtimeSeconds(&c, m, &v), k2025_02_10_08);
}

TEST(ModelMtimeSecondsTest, VolumeAnnotationWhenTheModelHasNoTime) {
  Manifest m;
  Manifest v = WithCreated("2025-02-10T08:00:00Z");
  EXPECT_EQ(ModelMtimeSeconds(nullptr, m, &v), k2025_02_10_08);
}

TEST(ModelMtimeSecondsTest, MalformedConfigDateFallsThroughToTheAnnotation) {
  ModelPackConfig c = ConfigCreated("last tuesday");
  Manifest m = WithCreated("2025-02-10T08:00:00Z");
  EXPECT_EQ(ModelMtimeSeconds(&c, m, nullptr), k2025_02_10_08);
}

TEST(ModelMtimeSecondsTest, NoTimeAnywhereIsTheEpoch) {
  Manifest m;
  EXPECT_EQ(ModelMtimeSeconds(nullptr, m, nullptr), 0);
}

TEST(ModelCreatedAtTest, IsTheConfigsTextAsWritten) {
  ModelPackConfig c = ConfigCreated("2025-02-10T08:00:00.123Z");
  EXPECT_EQ(ModelCreatedAt(&c, Manifest{}), "2025-02-10T08:00:00.123Z");
}

TEST(ModelCreatedAtTest, IgnoresTheVolumesTime) {
  EXPECT_EQ(ModelCreatedAt(nullptr, Manifest{}), std::nullopt);
}

TEST(FormatRfc3339SecondsTest, IsUtcWholeSeconds) {
  EXPECT_EQ(FormatRfc3339Seconds(k2025_02_10_08), "2025-02-10T08:00:00Z");
}

}  // namespace
}  // namespace modelfs
