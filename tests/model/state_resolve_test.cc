// ResolveModel on state artifacts (core/oci/state_artifact.h): a state S resolves like a model,
// with its verified config, and a state whose config disagrees with its subject, or whose
// config is not a state config, is refused. Manifests and blobs come from an in-memory
// ModelFetcher holding exactly the bytes a registry would.
#include <map>
#include <string>

#include "core/oci/media_types.h"
#include "core/oci/modelpack.h"
#include "core/oci/state_artifact.h"
#include "core/resolve/model_ref.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::testing::HasSubstr;

constexpr char kRepo[] = "models/llama";

class MemoryFetcher final : public ModelFetcher {
 public:
  // Stores a blob (or manifest) and returns its descriptor.
  Descriptor Put(std::string_view media_type, const std::string& bytes) {
    Descriptor d = DescribeBlob(media_type, bytes);
    blobs_[d.digest.str()] = bytes;
    return d;
  }
  absl::StatusOr<ManifestResult> GetManifest(const std::string& repository,
                                             const std::string& reference) override {
    auto it = blobs_.find(reference);
    if (repository != kRepo || it == blobs_.end()) return absl::NotFoundError(reference);
    return ManifestResult{it->second, std::string(kOciManifestMediaType), Digest::Of(it->second)};
  }
  absl::StatusOr<std::string> GetBlob(const std::string& repository, const Descriptor& d,
                                      uint64_t max_bytes) override {
    auto it = blobs_.find(d.digest.str());
    if (repository != kRepo || it == blobs_.end()) return absl::NotFoundError(d.digest.str());
    if (it->second.size() > max_bytes) return absl::InvalidArgumentError("too large");
    return it->second;
  }

 private:
  std::map<std::string, std::string> blobs_;
};

struct Published {
  MemoryFetcher fetcher;
  Descriptor model;
  Descriptor state;
};

// M (one weight file) and S (one state file) whose config is `config_for` applied to the
// config push would write.
void Publish(Published& p, const std::function<void(StateConfig&)>& edit_config = nullptr,
             std::string_view config_media_type = kStateConfigMediaType) {
  const std::string weights = "GGUF weights";
  p.fetcher.Put("application/octet-stream", weights);
  ModelPackConfig mc;
  mc.modelfs.diff_ids = {Digest::Of(weights)};
  const std::string mc_json = SerializeModelPackConfig(mc);
  p.fetcher.Put(kModelConfigMediaType, mc_json);
  absl::StatusOr<Manifest> m =
      BuildModelManifest(mc_json, {{"model.gguf", Digest::Of(weights), weights.size(),
                                    LayerKind::kWeight, LayerEncoding::kRaw, ""}});
  ASSERT_OK(m.status());
  p.model = p.fetcher.Put(kOciManifestMediaType, SerializeManifest(*m));
  p.model.artifact_type = std::string(kModelArtifactType);

  const std::string state_bytes = "llama.cpp state";
  p.fetcher.Put("application/octet-stream", state_bytes);
  StateConfig sc;
  sc.name = "primed";
  sc.format = "llama.cpp";
  sc.tokens = 479;
  sc.model = p.model;
  sc.model.artifact_type.clear();
  const std::string honest = SerializeStateConfig(sc);
  absl::StatusOr<Manifest> s =
      BuildStateManifest(honest, p.model, {{"prompt.state", Digest::Of(state_bytes), 15}});
  ASSERT_OK(s.status());
  if (edit_config) edit_config(sc);
  const std::string config = SerializeStateConfig(sc);
  s->config = p.fetcher.Put(config_media_type, config);
  p.state = p.fetcher.Put(kOciManifestMediaType, SerializeManifest(*s));
}

ImageReference RefTo(const Descriptor& d) {
  absl::StatusOr<ImageReference> r =
      ImageReference::Parse(absl::StrCat("reg.example/", kRepo, "@", d.digest.str()));
  EXPECT_OK(r.status());
  return *r;
}

TEST(StateResolveTest, AStateResolvesWithItsVerifiedConfigAndFiles) {
  Published p;
  Publish(p);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  ASSERT_OK_AND_ASSIGN(ResolvedModel r, ResolveModel(p.fetcher, RefTo(p.state)));
  ASSERT_TRUE(r.state.has_value());
  EXPECT_EQ(r.state->name, "primed");
  EXPECT_EQ(r.state->tokens, 479u);
  EXPECT_EQ(r.state->model.digest, p.model.digest);
  EXPECT_EQ(r.model_descriptor.digest, p.state.digest);
  ASSERT_EQ(r.layers.size(), 1u);
  EXPECT_EQ(r.layers[0].path, "prompt.state");
}

TEST(StateResolveTest, AModelResolvesWithoutAState) {
  Published p;
  Publish(p);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  ASSERT_OK_AND_ASSIGN(ResolvedModel r, ResolveModel(p.fetcher, RefTo(p.model)));
  EXPECT_FALSE(r.state.has_value());
}

TEST(StateResolveTest, AStateWhoseConfigNamesAnotherModelThanItsSubjectIsDataLoss) {
  Published p;
  Publish(p, [](StateConfig& c) { c.model.digest = Digest::Of("another model"); });
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  EXPECT_THAT(
      ResolveModel(p.fetcher, RefTo(p.state)),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("is not the model its config names")));
}

TEST(StateResolveTest, AStateWithAnotherConfigMediaTypeIsRefused) {
  Published p;
  Publish(p, nullptr, kModelConfigMediaType);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  EXPECT_THAT(ResolveModel(p.fetcher, RefTo(p.state)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("state config media type")));
}

TEST(StateResolveTest, AStateWithAMalformedConfigIsRefusedNamingTheField) {
  Published p;
  Publish(p, [](StateConfig& c) { c.format = "has space"; });
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  EXPECT_THAT(ResolveModel(p.fetcher, RefTo(p.state)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("state config.format")));
}

}  // namespace
}  // namespace modelfs
