// ResolveModel on an image index (a multi-platform modelcar): it resolves to the manifest for
// the node's platform, by the digest the index gives, skipping attestations; an index with no
// manifest for the node is refused naming the platforms it has. Manifests and blobs come from
// an in-memory ModelFetcher holding exactly the bytes a registry would.
#include <map>
#include <string>

#include "core/oci/manifest.h"
#include "core/oci/media_types.h"
#include "core/resolve/model_ref.h"
#include "nlohmann/json.hpp"
#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kRepo[] = "kserve/modelcar";
constexpr char kLayerMediaType[] = "application/vnd.oci.image.layer.v1.tar";

class MemoryFetcher final : public ModelFetcher {
 public:
  Descriptor Put(std::string_view media_type, const std::string& bytes) {
    Descriptor d = DescribeBlob(media_type, bytes);
    blobs_[d.digest.str()] = {bytes, std::string(media_type)};
    return d;
  }
  absl::StatusOr<ManifestResult> GetManifest(const std::string& repository,
                                             const std::string& reference) override {
    auto it = blobs_.find(reference);
    if (it == blobs_.end()) it = blobs_.find(tags_[reference]);
    if (repository != kRepo || it == blobs_.end()) return absl::NotFoundError(reference);
    return ManifestResult{it->second.first, it->second.second, Digest::Of(it->second.first)};
  }
  absl::StatusOr<std::string> GetBlob(const std::string& repository, const Descriptor& d,
                                      uint64_t max_bytes) override {
    auto it = blobs_.find(d.digest.str());
    if (repository != kRepo || it == blobs_.end()) return absl::NotFoundError(d.digest.str());
    return it->second.first;
  }
  void Tag(const std::string& tag, const Descriptor& d) { tags_[tag] = d.digest.str(); }

 private:
  std::map<std::string, std::pair<std::string, std::string>> blobs_;
  std::map<std::string, std::string> tags_;
};

// An image of one (uncompressed) layer for `architecture`.
Descriptor PutImage(MemoryFetcher& f, const std::string& architecture) {
  const std::string layer = "layer of " + architecture;
  const Descriptor l = f.Put(kLayerMediaType, layer);
  const std::string config =
      nlohmann::json({{"architecture", architecture},
                      {"os", "linux"},
                      {"rootfs", {{"type", "layers"}, {"diff_ids", {l.digest.str()}}}}})
          .dump();
  Manifest m;
  m.media_type = std::string(kOciManifestMediaType);
  m.config = f.Put(kOciConfigMediaType, config);
  m.layers = {l};
  Descriptor d = f.Put(kOciManifestMediaType, SerializeManifest(m));
  d.platform = Platform{architecture, "linux"};
  return d;
}

Descriptor PutIndex(MemoryFetcher& f, const std::vector<Descriptor>& manifests) {
  Index index;
  index.media_type = std::string(kOciIndexMediaType);
  index.manifests = manifests;
  const Descriptor d = f.Put(kOciIndexMediaType, SerializeIndex(index));
  f.Tag("v1", d);
  return d;
}

ImageReference Ref(const Descriptor& index) {
  return *ImageReference::Parse(absl::StrCat("reg.example/", kRepo, "@", index.digest.str()));
}

TEST(ImageIndexResolveTest, ResolvesToTheManifestForThisNodesPlatform) {
  MemoryFetcher f;
  const Descriptor other = PutImage(f, HostArchitecture() == "arm64" ? "amd64" : "arm64");
  const Descriptor mine = PutImage(f, HostArchitecture());
  Descriptor attestation = f.Put(kOciManifestMediaType, SerializeManifest([&] {
                                   Manifest m;
                                   m.media_type = std::string(kOciManifestMediaType);
                                   m.config = f.Put(kOciConfigMediaType, "{}");
                                   return m;
                                 }()));
  attestation.platform = Platform{"unknown", "unknown"};
  attestation.annotations["vnd.docker.reference.type"] = "attestation-manifest";
  const Descriptor index = PutIndex(f, {other, attestation, mine});
  ASSERT_OK_AND_ASSIGN(ResolvedModel r, ResolveModel(f, Ref(index)));
  EXPECT_TRUE(r.image);
  EXPECT_EQ(r.model_descriptor.digest, mine.digest);
  ASSERT_EQ(r.layers.size(), 1u);
  EXPECT_EQ(r.image_diff_ids.size(), 1u);
}

TEST(ImageIndexResolveTest, AnIndexByTagResolvesTheSameWay) {
  MemoryFetcher f;
  const Descriptor mine = PutImage(f, HostArchitecture());
  PutIndex(f, {mine});
  ASSERT_OK_AND_ASSIGN(
      ResolvedModel r,
      ResolveModel(f, *ImageReference::Parse(absl::StrCat("reg.example/", kRepo, ":v1"))));
  EXPECT_EQ(r.model_descriptor.digest, mine.digest);
}

TEST(ImageIndexResolveTest, RefusesAnIndexWithoutThisPlatformNamingWhatItHas) {
  MemoryFetcher f;
  const Descriptor s390 = PutImage(f, "s390x-not-here");
  const Descriptor index = PutIndex(f, {s390});
  EXPECT_THAT(ResolveModel(f, Ref(index)),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("linux/" + HostArchitecture()),
                             HasSubstr("linux/s390x-not-here"), HasSubstr(index.digest.str()))));
}

TEST(ImageIndexResolveTest, AnIndexOfOneManifestWithoutAPlatformIsThatManifest) {
  MemoryFetcher f;
  Descriptor only = PutImage(f, HostArchitecture());
  only.platform.reset();
  const Descriptor index = PutIndex(f, {only});
  ASSERT_OK_AND_ASSIGN(ResolvedModel r, ResolveModel(f, Ref(index)));
  EXPECT_EQ(r.model_descriptor.digest, only.digest);
}

TEST(ImageIndexResolveTest, RefusesAPlatformManifestThatIsNotTheOneTheIndexNames) {
  MemoryFetcher f;
  Descriptor mine = PutImage(f, HostArchitecture());
  // The index names bytes the registry does not hold under that digest.
  mine.digest = Digest::Of("something else");
  const Descriptor index = PutIndex(f, {mine});
  EXPECT_THAT(ResolveModel(f, Ref(index)), StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace modelfs
