// ModelPipeline against a real BlobCache over an in-memory remote: what the serve step gets,
// that a failed serve leaves no cache reference, and when prefetch runs.
#include "core/model/model_pipeline.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "core/cache/blob_cache.h"
#include "core/formats/safetensors.h"
#include "core/model/modelinfo.h"
#include "core/oci/chunk_index.h"
#include "core/oci/media_types.h"
#include "core/oci/tar.h"
#include "core/oci/tar_headers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/model/cached_model_fixture.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;

std::string SafetensorsBytes() {
  SafetensorsWriter w;
  EXPECT_OK(w.AddTensor("model.embed.weight", "BF16", {4, 8}, std::string(64, '\x01')));
  EXPECT_OK(w.AddTensor("model.norm.weight", "F32", {8}, std::string(32, '\x02')));
  return w.Serialize();
}

using ModelPipelineTest = ::modelfs::testing::CachedModelTest;

// Registers the model with a serve step that does nothing.
absl::Status RegisterUnserved(ModelPipeline& pipeline, const ResolvedModel& model,
                              PrefetchStart start = PrefetchStart::kAtOnce) {
  return pipeline
      .Register(
          model, "r", [](const LoadedModel&) { return absl::OkStatus(); }, start)
      .status();
}

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
  ASSERT_TRUE(synthetic[kModelInfoFileName].lazy());  // made on first lookup
  EXPECT_THAT(synthetic[kModelInfoFileName].make()(), HasSubstr("\"shown/reference:v1\""));
  EXPECT_EQ(References(a), 1);
}

// Tar header records nobody pinned (lazy_images) are checked against the layers as soon as the
// model is served, not at its first read: a lie is reported even if nothing reads the model.
TEST_F(ModelPipelineTest, RecordsNobodyPinnedAreCheckedOnceServedWithoutARead) {
  TarWriter real, forged;
  ASSERT_OK(real.AddFile("models/config.json", "{}"));
  ASSERT_OK(forged.AddFile("models/evil.json", "{}"));
  const std::string real_tar = real.Finish(), forged_tar = forged.Finish();
  ASSERT_EQ(forged_tar.size(), real_tar.size());
  const Digest layer =
      AddLayer(real_tar, LayerEncoding::kTar, "", std::string(kOciLayerTarMediaType));
  TarHeaderRecorder recorder;
  recorder.Feed(forged_tar);
  std::optional<TarHeaders> records = recorder.Finish(layer, "forged");
  ASSERT_TRUE(records.has_value());
  model_.image = true;
  model_.image_diff_ids = {layer};
  model_.tar_headers[layer] = std::make_shared<const TarHeaders>(*records);
  model_.tar_headers_unpinned = true;
  absl::Notification checked;
  absl::Status result;
  PipelineOptions o{PrefetchPolicy::kNone, false};
  o.on_records_checked = [&](const std::string& model, const absl::Status& st) {
    EXPECT_EQ(model, ModelRef());
    result = st;
    checked.Notify();
  };
  ModelPipeline pipeline(cache_.get(), o);
  ASSERT_OK_AND_ASSIGN(LoadedModel loaded, pipeline.Register(model_, "r", [](const LoadedModel&) {
    return absl::OkStatus();
  }));
  ASSERT_TRUE(checked.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_THAT(result,
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(layer.str()), HasSubstr("entry 'models/evil.json'"))));
  EXPECT_FALSE(loaded.records_check->Passed());
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
  ASSERT_OK(RegisterUnserved(pipeline, model_));
  pipeline.Unregister(ModelRef());
  EXPECT_EQ(References(a), 0);
}

TEST_F(ModelPipelineTest, DeferredPrefetchAllFetchesNoLayerUntilStartPrefetch) {
  Digest a = AddRawLayer(std::string(100000, 'x'), "a.bin");
  ModelPipeline pipeline(cache_.get(), {PrefetchPolicy::kAll, false});
  ASSERT_OK(RegisterUnserved(pipeline, model_, PrefetchStart::kOnStartPrefetch));
  ASSERT_TRUE(cache_->WaitIdle(absl::Now() + absl::Seconds(30)));
  ASSERT_OK_AND_ASSIGN(BlobCache::LayerInfo before, cache_->GetLayerInfo(a));
  EXPECT_FALSE(before.whole_verified);
  EXPECT_EQ(cache_->stats().bytes_fetched, 0u);

  pipeline.StartPrefetch(ModelRef());
  ASSERT_TRUE(cache_->WaitIdle(absl::Now() + absl::Seconds(30)));
  ASSERT_OK_AND_ASSIGN(BlobCache::LayerInfo after, cache_->GetLayerInfo(a));
  EXPECT_TRUE(after.whole_verified);
  EXPECT_EQ(cache_->stats().bytes_fetched, 100000u);
}

// .modelinfo.json is made on first lookup, so registering reads nothing; the headers prefetch
// then reads (and fetches) exactly what making it reads, so that the lookup finds it cached.
TEST_F(ModelPipelineTest, HeadersPrefetchReadsWhatModelInfoReadsThroughTheCache) {
  const std::string st = SafetensorsBytes();
  Digest a = AddRawLayer(st, "model.safetensors");
  model_.chunk_indexes[a] = BuildChunkIndex(st);
  ModelPipeline pipeline(cache_.get(), {PrefetchPolicy::kHeadersOnly, false});
  SyntheticFiles synthetic;
  ASSERT_OK(pipeline
                .Register(
                    model_, "r",
                    [&](const LoadedModel& m) {
                      synthetic = m.synthetic;
                      return absl::OkStatus();
                    },
                    PrefetchStart::kOnStartPrefetch)
                .status());
  EXPECT_EQ(cache_->stats().bytes_served, 0u);

  pipeline.StartPrefetch(ModelRef());
  ASSERT_TRUE(pipeline.WaitForHeaderReads(absl::Seconds(30)));
  const uint64_t served_by_prefetch = cache_->stats().bytes_served;
  const uint64_t fetched = cache_->stats().bytes_fetched;
  ASSERT_GT(served_by_prefetch, 8u);
  ASSERT_TRUE(synthetic[kModelInfoFileName].lazy());
  EXPECT_THAT(synthetic[kModelInfoFileName].make()(), HasSubstr("model.safetensors"));
  EXPECT_EQ(cache_->stats().bytes_served, 2 * served_by_prefetch);
  EXPECT_EQ(cache_->stats().bytes_fetched, fetched);  // all of it found cached
}

TEST_F(ModelPipelineTest, HeadersPrefetchSkipsALayerThatIsVerifiedWhole) {
  Digest a = AddRawLayer(SafetensorsBytes(), "model.safetensors");
  ModelPipeline pipeline(cache_.get(), {PrefetchPolicy::kHeadersOnly, false});
  ASSERT_OK(RegisterUnserved(pipeline, model_));
  const uint64_t served_by_modelinfo = cache_->stats().bytes_served;
  ASSERT_TRUE(pipeline.WaitForHeaderReads(absl::Seconds(30)));
  EXPECT_EQ(cache_->stats().bytes_served, served_by_modelinfo);
  EXPECT_EQ(References(a), 1);
}

}  // namespace
}  // namespace modelfs
