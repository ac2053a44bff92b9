// ModelHost's success path with fakes: an in-memory remote (FakeRemote) for the layers, a fake
// mounter and registry connector, and a real cache in a temp dir. No root, FUSE or network.
#include "host/model_host.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/oci/media_types.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "host/model_records.h"
#include "testsupport/fakes/fake_remote.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {
namespace {

using ::modelfs::testing::FakeRemote;
using ::modelfs::testing::StatusIs;
using ::modelfs::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// What the fake mounter and its mount were asked, in order.
struct Calls {
  absl::Mutex mu;
  std::vector<std::string> list ABSL_GUARDED_BY(mu);
  void Add(const std::string& c) {
    absl::MutexLock lock(&mu);
    list.push_back(c);
  }
  std::vector<std::string> Get() {
    absl::MutexLock lock(&mu);
    return list;
  }
};

class FakeMount final : public ModelMount {
 public:
  FakeMount(std::shared_ptr<ModelTree> tree, Calls* calls)
      : tree_(std::move(tree)), calls_(calls) {}
  absl::Status RemoveModel(const std::string& name) override {
    calls_->Add("remove " + name);
    return tree_->RemoveModel(name);
  }
  absl::Status Unmount() override {
    calls_->Add("unmount");
    return absl::OkStatus();
  }
  absl::Status Detach() override {
    calls_->Add("detach");
    return absl::OkStatus();
  }
  absl::Status Wait() override {
    calls_->Add("wait");
    return absl::OkStatus();
  }
  int fuse_fd() const override { return 42; }
  ModelTree& tree() { return *tree_; }

 private:
  std::shared_ptr<ModelTree> tree_;
  Calls* const calls_;
};

class FakeMounter final : public ModelMounter {
 public:
  explicit FakeMounter(Calls* calls) : calls_(calls) {}
  absl::Status DetachStaleMount(const std::string& dir) override {
    calls_->Add("detach-stale " + dir);
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<ModelMount>> Mount(const std::string& dir,
                                                    std::shared_ptr<ModelTree> tree,
                                                    const FuseMountOptions&) override {
    calls_->Add("mount " + dir);
    if (fail_) return absl::PermissionDeniedError("fusermount3: mount failed");
    mounted_ = tree;
    return std::make_unique<FakeMount>(std::move(tree), calls_);
  }
  absl::StatusOr<std::unique_ptr<ModelMount>> Adopt(int, const std::string& dir,
                                                    std::shared_ptr<ModelTree> tree,
                                                    const FuseMountOptions&) override {
    calls_->Add("adopt " + dir);
    return std::make_unique<FakeMount>(std::move(tree), calls_);
  }
  void LazyUnmount(const std::string& dir) override { calls_->Add("lazy-unmount " + dir); }

  bool fail_ = false;                   // Mount fails
  std::shared_ptr<ModelTree> mounted_;  // the tree of the last Mount

 private:
  Calls* const calls_;
};

class ModelHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ModelHostParts parts;
    parts.connect_registry =
        [this](const std::string& registry) -> absl::StatusOr<std::shared_ptr<RegistryClient>> {
      calls_.Add("connect " + registry);
      return absl::UnavailableError(absl::StrCat("registry ", registry, " is unreachable"));
    };
    parts.source = std::make_unique<RegistryRoutingSource>();
    CacheOptions co;
    co.dir = tmp_.Join("cache").string();
    co.log = [](const log::Event&) {};
    ASSERT_OK_AND_ASSIGN(parts.cache, BlobCache::Open(co, parts.source.get()));
    auto mounter = std::make_unique<FakeMounter>(&calls_);
    mounter_ = mounter.get();
    parts.mounter = std::move(mounter);
    ModelHostOptions o;
    o.records = tmp_.Join("models");
    ASSERT_OK_AND_ASSIGN(host_, ModelHost::Create(o, std::move(parts)));

    ASSERT_OK_AND_ASSIGN(model_.ref, ImageReference::Parse("registry.test/models/m:v1"));
    model_.registry = "registry.test";
    model_.repository = "models/m";
    model_.model_descriptor.media_type = std::string(kOciManifestMediaType);
    model_.model_descriptor.digest = Digest::Of("the model manifest");
    model_.model_descriptor.size = 18;
    model_.model.config.digest = Digest::Of("the model config");
    ModelLayer l;
    l.descriptor.media_type = "application/vnd.cncf.model.doc.v1.raw";
    l.descriptor.digest = remote_->AddBlob(kBytes);
    l.descriptor.size = kBytes.size();
    l.kind = LayerKind::kDoc;
    l.encoding = LayerEncoding::kRaw;
    l.path = "README.md";
    model_.layers.push_back(l);
  }

  Digest Layer() const { return model_.layers[0].descriptor.digest; }
  std::string ModelRef() const { return model_.model_descriptor.digest.str(); }
  int References() const {
    absl::StatusOr<BlobCache::LayerInfo> info = host_->cache().GetLayerInfo(Layer());
    return info.ok() ? info->references : 0;
  }

  const std::string kBytes = "# a model\nits weights are elsewhere\n";
  TempDir tmp_;
  Calls calls_;
  std::shared_ptr<FakeRemote> remote_ = std::make_shared<FakeRemote>();
  FakeMounter* mounter_ = nullptr;  // owned by host_
  std::unique_ptr<ModelHost> host_;
  ResolvedModel model_;
};

TEST_F(ModelHostTest, CreateRefusesMissingParts) {
  EXPECT_THAT(ModelHost::Create({}, {}).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ModelHostTest, RegisterFromServesTheModelsBytesVerifiedThroughTheCache) {
  ASSERT_OK_AND_ASSIGN(LoadedModel loaded,
                       host_->RegisterFrom("m", model_, remote_, PrefetchStart::kOnStartPrefetch));
  EXPECT_FALSE(loaded.files.empty());
  EXPECT_TRUE(host_->tree().HasModel("m"));
  EXPECT_EQ(References(), 1);
  ASSERT_OK_AND_ASSIGN(std::string got, host_->reader().Read(Layer(), 0, kBytes.size()));
  EXPECT_EQ(got, kBytes);
  EXPECT_GE(remote_->requests(), 1);
  // No registry was asked: the layers come from the source given.
  EXPECT_THAT(calls_.Get(), ::testing::IsEmpty());
}

TEST_F(ModelHostTest, RemoveTakesTheModelOutOfTheTreeAndDropsItsReferences) {
  ASSERT_OK(host_->RegisterFrom("m", model_, remote_, PrefetchStart::kOnStartPrefetch).status());
  ASSERT_OK(host_->Remove("m", ModelRef()));
  EXPECT_FALSE(host_->tree().HasModel("m"));
  EXPECT_EQ(References(), 0);
  EXPECT_THAT(host_->Remove("m", ""), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ModelHostTest, MountServesTheTreeAndRemoveGoesThroughTheMount) {
  ASSERT_OK(host_->DetachStaleMount("/mnt/models"));
  ASSERT_OK(host_->Mount("/mnt/models", FuseMountOptions{}));
  EXPECT_EQ(host_->fuse_fd(), 42);
  EXPECT_THAT(host_->Mount("/mnt/models", FuseMountOptions{}),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_OK(host_->RegisterFrom("m", model_, remote_, PrefetchStart::kAtOnce).status());
  ASSERT_OK(host_->Remove("m", ModelRef()));
  ASSERT_OK(host_->Unmount());
  ASSERT_OK(host_->Unmount());
  EXPECT_THAT(calls_.Get(),
              ElementsAre("detach-stale /mnt/models", "mount /mnt/models", "remove m", "unmount"));
}

TEST_F(ModelHostTest, UnmountWithKeepMountDetachesAndNeverUnmounts) {
  ASSERT_OK(host_->Adopt(7, "/mnt/models", FuseMountOptions{}));
  ASSERT_OK(host_->Unmount(/*keep_mount=*/true));
  host_.reset();
  EXPECT_THAT(calls_.Get(), ElementsAre("adopt /mnt/models", "detach"));
}

TEST_F(ModelHostTest, RegisterReadsTheLayersFromTheModelsRegistry) {
  EXPECT_THAT(host_->Register("m", model_, PrefetchStart::kAtOnce).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("registry.test")));
  EXPECT_FALSE(host_->tree().HasModel("m"));
  // A failed connection is not kept: the next registration asks again.
  EXPECT_FALSE(host_->Register("m", model_, PrefetchStart::kAtOnce).ok());
  EXPECT_THAT(calls_.Get(), ElementsAre("connect registry.test", "connect registry.test"));
}

// `modelfs mount`: the model is the root of a mount of its own, with a nested model (a state)
// under a directory of it.
TEST_F(ModelHostTest, MountModelServesTheModelAtTheRootOfItsOwnMount) {
  ResolvedModel state = model_;
  state.model_descriptor.digest = Digest::Of("the state manifest");
  state.layers[0].path = "kv.bin";
  ASSERT_OK_AND_ASSIGN(LoadedModel state_loaded, host_->Load(state, "reg/s:1", remote_));
  ModelHost::NestedModel nested{".state", state_loaded};
  ASSERT_OK_AND_ASSIGN(LoadedModel loaded, host_->MountModel("/mnt/m", FuseMountOptions{}, model_,
                                                             "reg/m:1", &nested, remote_));
  EXPECT_FALSE(loaded.files.empty());
  EXPECT_EQ(host_->fuse_fd(), 42);
  // The tree mounted is the host's, and its root is the model: README.md, .modelinfo.json
  // (naming the reference given) and .state/ with the state's files.
  ASSERT_NE(mounter_->mounted_, nullptr);
  EXPECT_EQ(mounter_->mounted_.get(), &host_->tree());
  ModelTree& tree = host_->tree();
  ASSERT_OK_AND_ASSIGN(NodeAttr readme, tree.Lookup(ModelTree::kRootIno, "README.md"));
  ASSERT_OK_AND_ASSIGN(std::string got, tree.Read(readme.ino, 0, kBytes.size()));
  EXPECT_EQ(got, kBytes);
  ASSERT_OK_AND_ASSIGN(NodeAttr info, tree.Lookup(ModelTree::kRootIno, ".modelinfo.json"));
  ASSERT_OK_AND_ASSIGN(std::string json, tree.Read(info.ino, 0, info.size));
  EXPECT_THAT(json, HasSubstr("reg/m:1"));
  ASSERT_OK_AND_ASSIGN(NodeAttr state_dir, tree.Lookup(ModelTree::kRootIno, ".state"));
  EXPECT_OK(tree.Lookup(state_dir.ino, "kv.bin").status());
  EXPECT_OK(tree.Lookup(state_dir.ino, ".modelinfo.json").status());
  // Both models hold their cache references, under their own digests.
  EXPECT_EQ(References(), 2);
  // One model per host at the root: no second one, no model beside it, none removed.
  EXPECT_THAT(
      host_->MountModel("/mnt/m", FuseMountOptions{}, model_, "reg/m:1", nullptr, remote_).status(),
      StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(host_->RegisterFrom("m", model_, remote_, PrefetchStart::kAtOnce).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(host_->Remove("m", ""), StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_OK(host_->Wait());
  ASSERT_OK(host_->Unmount());
  EXPECT_THAT(calls_.Get(), ElementsAre("mount /mnt/m", "remove m", "wait", "unmount"));
}

TEST_F(ModelHostTest, MountModelThatFailsToMountLeavesNoReference) {
  mounter_->fail_ = true;
  EXPECT_THAT(
      host_->MountModel("/mnt/m", FuseMountOptions{}, model_, "reg/m:1", nullptr, remote_).status(),
      StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(References(), 0);
  EXPECT_EQ(host_->fuse_fd(), -1);
  EXPECT_OK(host_->Wait());
}

TEST_F(ModelHostTest, MountModelNeedsAHostThatServesNoModelYet) {
  ASSERT_OK(host_->RegisterFrom("m", model_, remote_, PrefetchStart::kOnStartPrefetch).status());
  EXPECT_THAT(
      host_->MountModel("/mnt/m", FuseMountOptions{}, model_, "reg/m:1", nullptr, remote_).status(),
      StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(calls_.Get(), ::testing::IsEmpty());
}

TEST_F(ModelHostTest, RecordsAreKeptUnderTheRecordsDirectory) {
  EXPECT_THAT(host_->Restore("m", PrefetchStart::kAtOnce).status(),
              StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK(host_->SaveRecord("m", model_));
  EXPECT_TRUE(std::filesystem::exists(tmp_.Join("models") / "m"));
  ASSERT_OK(host_->DeleteRecord("m"));
  EXPECT_FALSE(std::filesystem::exists(tmp_.Join("models") / "m"));
}

// --- The operations the snapshotter sees (ModelService) ---

TEST_F(ModelHostTest, DiscardTakesTheModelOutOfTheTreeWithoutTellingTheMount) {
  ASSERT_OK(host_->Mount("/mnt/models", FuseMountOptions{}));
  ASSERT_OK(host_->RegisterFrom("m", model_, remote_, PrefetchStart::kOnStartPrefetch).status());
  ASSERT_TRUE(host_->HasModel("m"));
  host_->Discard("m", ModelRef());
  EXPECT_FALSE(host_->HasModel("m"));
  EXPECT_EQ(References(), 0);
  EXPECT_THAT(calls_.Get(), ElementsAre("mount /mnt/models"));
}

TEST_F(ModelHostTest, RecordsAreListedAndLoadedThroughTheRecordsDirectory) {
  const std::string name = "sha256-" + std::string(64, 'a');
  EXPECT_THAT(host_->ListRecords(), ::testing::IsEmpty());
  EXPECT_THAT(host_->LoadRecord(name).status(), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK(host_->SaveRecord(name, model_));
  EXPECT_THAT(host_->ListRecords(), ElementsAre(name));
  // What model_records.h makes of it (this model_ carries no manifest bytes to keep).
  EXPECT_EQ(host_->LoadRecord(name).status(), LoadModelRecord(tmp_.Join("models"), name).status());
}

TEST_F(ModelHostTest, TheCacheIsSeenThroughTheHostsOwnCalls) {
  ASSERT_OK(host_->RegisterFrom("m", model_, remote_, PrefetchStart::kOnStartPrefetch).status());
  ASSERT_OK(host_->FetchLayer(Layer()));
  ASSERT_OK_AND_ASSIGN(BlobCache::LayerInfo info, host_->CachedLayer(Layer()));
  EXPECT_EQ(info.size, kBytes.size());
  EXPECT_THAT(info.models, ElementsAre(ModelRef()));
  EXPECT_EQ(host_->CachedLayers().count(Layer()), 1u);
  EXPECT_FALSE(host_->cache_disk_full());
  // A layer a model references stays.
  EXPECT_EQ(host_->EvictLayers({Layer()}).busy, std::vector<Digest>{Layer()});
  EXPECT_THAT(host_->CachedLayer(Digest::Of("no such layer")).status(),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ModelHostTest, ClientIsTheRegistryConnectorsAndNotKeptWhenItFails) {
  EXPECT_THAT(host_->Client("registry.test").status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("registry.test")));
  EXPECT_FALSE(host_->Client("registry.test").ok());
  EXPECT_THAT(calls_.Get(), ElementsAre("connect registry.test", "connect registry.test"));
}

// --- ModelHost::Open: the host both binaries build from their configuration ---

TEST(ModelHostOpenTest, OpenRefusesAConfigWithoutACacheDirectory) {
  EXPECT_THAT(ModelHost::Open(ModelHostConfig{}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no cache directory")));
}

TEST(ModelHostOpenTest, OpenMakesTheCacheDirectoryAndDecodesCompressedLayersByDefault) {
  TempDir tmp;
  ModelHostConfig config;
  config.cache.dir = tmp.Join("a/b/cache").string();
  config.cache.log = [](const log::Event&) {};
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ModelHost> host, ModelHost::Open(std::move(config)));
  EXPECT_TRUE(std::filesystem::is_directory(tmp.Join("a/b/cache")));
  EXPECT_NE(host->decoding(), nullptr);
}

TEST(ModelHostOpenTest, OpenWithoutDecodingOrMountHasNeither) {
  TempDir tmp;
  ModelHostConfig config;
  config.cache.dir = tmp.path().string();
  config.cache.log = [](const log::Event&) {};
  config.decode = false;
  config.mount = false;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ModelHost> host, ModelHost::Open(std::move(config)));
  EXPECT_EQ(host->decoding(), nullptr);
  EXPECT_THAT(host->Mount(tmp.Join("mnt").string(), FuseMountOptions{}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no mounter")));
}

TEST(ModelHostOpenTest, OpenPassesOnTheCachesRefusalOfADirectoryInUse) {
  TempDir tmp;
  auto config = [&] {
    ModelHostConfig c;
    c.cache.dir = tmp.path().string();
    c.cache.log = [](const log::Event&) {};
    c.mount = false;
    return c;
  };
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ModelHost> first, ModelHost::Open(config()));
  EXPECT_THAT(ModelHost::Open(config()).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr(tmp.path().string())));
}

TEST(ModelHostOpenTest, OpenKeepsTheClientMapItIsGiven) {
  TempDir tmp;
  std::vector<std::string> asked;
  ModelHostConfig config;
  config.cache.dir = tmp.path().string();
  config.cache.log = [](const log::Event&) {};
  config.mount = false;
  config.clients = std::make_unique<RegistryClients>(
      [&asked](const std::string& registry) -> absl::StatusOr<std::shared_ptr<RegistryClient>> {
        asked.push_back(registry);
        return absl::UnavailableError("the map given");
      });
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ModelHost> host, ModelHost::Open(std::move(config)));
  EXPECT_THAT(host->Client("registry.test").status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("the map given")));
  EXPECT_THAT(asked, ElementsAre("registry.test"));
}

// As the daemon's: a bad credentials file does not stop the host from opening; each registry's
// client is refused naming it, when it is first asked for.
TEST(ModelHostOpenTest, OpenConnectsRegistriesWithTheAccessOptionsOnFirstUse) {
  TempDir tmp;
  const std::filesystem::path docker_config = tmp.Join("config.json");
  tmp.WriteFile("config.json", "{ not json");
  ModelHostConfig config;
  config.cache.dir = tmp.Join("cache").string();
  config.cache.log = [](const log::Event&) {};
  config.mount = false;
  config.registry.docker_config = docker_config.string();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ModelHost> host, ModelHost::Open(std::move(config)));
  EXPECT_THAT(host->Client("registry.test").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(docker_config.string())));
}

}  // namespace
}  // namespace modelfs
