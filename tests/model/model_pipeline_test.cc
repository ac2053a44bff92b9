// ModelPipeline against a real BlobCache over an in-memory remote: what the serve step gets,
// that a failed serve leaves no cache reference, and when prefetch runs.
#include "core/model/model_pipeline.h"

#include <memory>
#include <string>
#include <vector>

#include "core/cache/blob_cache.h"
#include "core/model/modelinfo.h"
#include "core/oci/media_types.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/model/cached_model_fixture.h"
#include "tests/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;

using ModelPipelineTest = ::modelfs::testing::CachedModelTest;

TEST_F(ModelPipelineTest, ServeGetsTheModelsFilesAndItsModelInfo) {
  Digest a = AddRawLayer("first file\n", "a.txt");
  ModelPipeline pipeline(cache_.get(), {PrefetchPolicy::kNone, false});
  std::vector<TreeFile> served;
  SyntheticFiles synthetic;
  ASSERT_OK_AND_ASSIGN(LoadedModel loaded,
                       pipeline.Register(model_, "shown/reference:v1", [&](const LoadedModel& m) {
                         served = m.files;
                         synthetic = m.synthetic;
                         return absl::OkStatus();
                       }));
  EXPECT_THAT(served, ElementsAre(Field(&TreeFile::path, "a.txt")));
  EXPECT_EQ(loaded.layers, std::vector<Digest>{a});
  ASSERT_EQ(synthetic.count(kModelInfoFileName), 1u);
  EXPECT_THAT(synthetic[kModelInfoFileName], HasSubstr("\"shown/reference:v1\""));
  EXPECT_EQ(References(a), 1);
}

TEST_F(ModelPipelineTest, AFailedServeFailsRegisterAndLeavesNoReference) {
  Digest a = AddRawLayer("first file\n", "a.txt");
  ModelPipeline pipeline(cache_.get(), {PrefetchPolicy::kAll, false});
  EXPECT_THAT(pipeline
                  .Register(model_, "r",
                            [](const LoadedModel&) { return absl::UnavailableError("no mount"); })
                  .status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("no mount")));
  EXPECT_EQ(References(a), 0);
}

TEST_F(ModelPipelineTest, UnregisterDropsTheModelsReferences) {
  Digest a = AddRawLayer("first file\n", "a.txt");
  ModelPipeline pipeline(cache_.get(), {PrefetchPolicy::kNone, false});
  ASSERT_OK(
      pipeline.Register(model_, "r", [](const LoadedModel&) { return absl::OkStatus(); }).status());
  pipeline.Unregister(ModelRef());
  EXPECT_EQ(References(a), 0);
}

}  // namespace
}  // namespace modelfs
