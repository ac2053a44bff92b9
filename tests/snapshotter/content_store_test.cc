// Image volumes that name a plain ModelPack artifact: the snapshot key containerd 2.1 sends, and
// verified reads of a model from a content store (an in-memory fake of containerd's).
#include <map>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/oci/manifest.h"
#include "core/oci/modelpack.h"
#include "snapshotter/content/content_store_blob_reader.h"
#include "snapshotter/content/content_store_model.h"
#include "snapshotter/content/image_volume_key.h"
#include "testsupport/fakes/fake_content_store.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs::snapshotter {
namespace {

using ::modelfs::testing::FakeContentStore;
using ::modelfs::testing::StatusIs;
using ::testing::HasSubstr;

const std::string kSandbox(64, 'a');
const std::string kImageHex = std::string(63, '0') + "1";

std::string Key(const std::string& ns, const std::string& state) {
  return absl::StrCat(ns, "/17/", state, "/io.containerd.grpc.v1.cri/image-volumes/", kSandbox, "/",
                      kImageHex);
}

TEST(ImageVolumeKeyTest, ParsesTheKeyContainerd21SendsForAnImageVolume) {
  std::optional<ImageVolumeKey> k = ParseImageVolumeKey(Key("k8s.io", "/run/containerd"));
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(k->ns, "k8s.io");
  EXPECT_EQ(k->sandbox_id, kSandbox);
  EXPECT_EQ(k->image.str(), "sha256:" + kImageHex);
}

TEST(ImageVolumeKeyTest, RefusesEveryOtherShape) {
  const std::string good = Key("k8s.io", "/run/containerd");
  for (const std::string& key : {
           std::string("k8s.io/17/sha256:" + kImageHex),  // an unpacked layer
           std::string("k8s.io/17/" + kSandbox),          // a container rootfs
           Key("k8s.io", ""),                             // no state directory
           Key("k8s io", "/run/containerd"),              // bad namespace
           Key("k8s.io", "/run/../containerd"),           // dot-dot in the state
           absl::StrCat("k8s.io/x/run/io.containerd.grpc.v1.cri/image-volumes/", kSandbox, "/",
                        kImageHex),                // counter not decimal
           good + "/x",                            // one more component
           good.substr(0, good.size() - 1),        // short image hex
           good.substr(0, good.size() - 1) + "G",  // not hex
           absl::StrCat("k8s.io/17//run/io.containerd.grpc.v1.cri/image-volumes/",
                        std::string(63, 'a'), "/", kImageHex),  // short sandbox id
           absl::StrCat("k8s.io/17//a/io.containerd.grpc.v1.cri/image-volumes/x",
                        "/io.containerd.grpc.v1.cri/image-volumes/", kSandbox, "/",
                        kImageHex),  // the marker twice
       }) {
    EXPECT_FALSE(ParseImageVolumeKey(key).has_value()) << key;
  }
}

ContentStoreReaderOptions SmallChunks() {
  ContentStoreReaderOptions o;
  o.chunk_size = 64 << 10;  // the smallest valid chunk
  o.piece_bytes = 100000;   // several content API calls per layer
  o.recent_chunks = 2;
  return o;
}

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + i / 977) & 0xff);
  return s;
}

TEST(ContentStoreBlobReaderTest, ReadsReturnTheLayersBytesAfterOneWholeLayerCheck) {
  FakeContentStore store;
  const std::string blob = Pattern(300000);
  const Digest d = store.Add("k8s.io", blob);
  ContentStoreBlobReader reader(&store, SmallChunks());
  ASSERT_OK(reader.AddLayer("sha256:m", "k8s.io", d, blob.size()));
  EXPECT_FALSE(reader.IsReady(d, 0, 10));
  ASSERT_OK_AND_ASSIGN(std::string got, reader.Read(d, 70000, 100000));
  EXPECT_EQ(got, blob.substr(70000, 100000));
  ASSERT_OK_AND_ASSIGN(std::string tail, reader.Read(d, 299990, 100));
  EXPECT_EQ(tail, blob.substr(299990));
  EXPECT_EQ(reader.layers_verified(), 1u);
  EXPECT_TRUE(reader.IsReady(d, 0, 10));
}

TEST(ContentStoreBlobReaderTest, ALayerWhoseBytesDoNotMatchItsDigestIsNeverServed) {
  FakeContentStore store;
  const std::string blob = Pattern(200000);
  const Digest d = store.Add("k8s.io", blob);
  store.Corrupt("k8s.io", d, 150000);
  ContentStoreBlobReader reader(&store, SmallChunks());
  ASSERT_OK(reader.AddLayer("sha256:m", "k8s.io", d, blob.size()));
  EXPECT_THAT(reader.Read(d, 0, 10), StatusIs(absl::StatusCode::kDataLoss, HasSubstr(d.str())));
  EXPECT_THAT(reader.Read(d, 0, 10), StatusIs(absl::StatusCode::kDataLoss));
}

TEST(ContentStoreBlobReaderTest, BytesChangedAfterTheCheckAreRefusedByTheChunkIndex) {
  FakeContentStore store;
  const std::string blob = Pattern(200000);
  const Digest d = store.Add("k8s.io", blob);
  ContentStoreBlobReader reader(&store, SmallChunks());
  ASSERT_OK(reader.AddLayer("sha256:m", "k8s.io", d, blob.size()));
  ASSERT_OK(reader.VerifyLayer(d));
  store.Corrupt("k8s.io", d, 140000);  // chunk 2
  ASSERT_OK_AND_ASSIGN(std::string first, reader.Read(d, 0, 1000));
  EXPECT_EQ(first, blob.substr(0, 1000));
  EXPECT_THAT(reader.Read(d, 131072, 10),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("chunk 2")));
}

TEST(ContentStoreBlobReaderTest, ALayerIsReadFromTheNamespaceThatRegisteredIt) {
  FakeContentStore store;
  const Digest d = store.Add("other", "bytes of another namespace");
  ContentStoreBlobReader reader(&store, SmallChunks());
  ASSERT_OK(reader.AddLayer("sha256:m", "k8s.io", d, 26));
  EXPECT_THAT(reader.Read(d, 0, 5), StatusIs(absl::StatusCode::kNotFound));
}

TEST(ContentStoreBlobReaderTest, RemovingTheLastModelDropsTheLayer) {
  FakeContentStore store;
  const Digest d = store.Add("k8s.io", "abc");
  ContentStoreBlobReader reader(&store);
  ASSERT_OK(reader.AddLayer("sha256:m1", "k8s.io", d, 3));
  ASSERT_OK(reader.AddLayer("sha256:m2", "k8s.io", d, 3));
  reader.RemoveModel("sha256:m1");
  EXPECT_TRUE(reader.Has(d));
  reader.RemoveModel("sha256:m2");
  EXPECT_FALSE(reader.Has(d));
  EXPECT_THAT(reader.Read(d, 0, 3), StatusIs(absl::StatusCode::kNotFound));
}

// M with a config and one raw layer, stored in the fake content store as containerd would.
TEST(ResolveContentStoreModelTest, ResolvesAModelPackArtifactFromTheContentStore) {
  FakeContentStore store;
  const std::string config = R"({"descriptor":{"name":"tiny"},"config":{"format":"gguf"},)"
                             R"("modelfs":{"diffIds":[]}})";
  const std::string weights = "GGUF weights";
  const Digest wd = store.Add("k8s.io", weights);
  ModelLayerInput in;
  in.path = "model.gguf";
  in.digest = wd;
  in.size = weights.size();
  ASSERT_OK_AND_ASSIGN(Manifest m, BuildModelManifest(config, {in}));
  store.Add("k8s.io", config);
  const Digest md = store.Add("k8s.io", SerializeManifest(m));
  ImageVolumeKey key{"k8s.io", kSandbox, md};
  ASSERT_OK_AND_ASSIGN(ResolvedModel rm, ResolveContentStoreModel(store, key));
  EXPECT_EQ(rm.model_descriptor.digest, md);
  ASSERT_EQ(rm.layers.size(), 1u);
  EXPECT_EQ(rm.layers[0].path, "model.gguf");
  EXPECT_EQ(rm.layers[0].descriptor.digest, wd);

  key.ns = "elsewhere";
  EXPECT_THAT(ResolveContentStoreModel(store, key), StatusIs(absl::StatusCode::kNotFound));
}

TEST(ResolveContentStoreModelTest, AnOrdinaryBlobIsNotAModel) {
  FakeContentStore store;
  const Digest d = store.Add("k8s.io", R"({"architecture":"amd64","os":"linux"})");
  EXPECT_THAT(ResolveContentStoreModel(store, ImageVolumeKey{"k8s.io", kSandbox, d}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace modelfs::snapshotter
