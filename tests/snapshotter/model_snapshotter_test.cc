// ModelSnapshotter's state machine with its collaborators faked or in a temp dir: no root, no
// FUSE, no network. A fake mounter records what the snapshotter asks of the kernel, a fake
// content store holds the models of image volumes, a registry connector reaches nothing (or
// waits until the test lets it go), and the clock is a FakeClock; the metadata store and the
// cache are the real ones under a temp dir.
//
// Covered: the FUSE mount at start (fresh, inherited, failing) and at shutdown; Prepare of a
// model (registered once, shared by a second snapshot), Remove (the model leaves the mount with
// its last snapshot); Prepares that fail or are refused leaving nothing behind; restart recovery
// (snapshots adopted, stale records deleted, a model still registering waited for on the clock).
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "core/oci/manifest.h"
#include "core/oci/modelpack.h"
#include "core/oci/tar.h"
#include "core/oci/volume_image.h"
#include "core/status/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "host/model_host.h"
#include "host/model_records.h"
#include "snapshotter/content/content_store_model.h"
#include "snapshotter/model/model_snapshotter.h"
#include "testsupport/fakes/fake_clock.h"
#include "testsupport/fakes/fake_content_store.h"
#include "testsupport/fakes/fake_model_service.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"
#include "testsupport/trust/test_keys.h"

namespace modelfs::snapshotter {
namespace {

namespace fs = std::filesystem;
using ::modelfs::testing::FakeClock;
using ::modelfs::testing::FakeContentStore;
using ::modelfs::testing::FakeModelService;
using ::modelfs::testing::StatusIs;
using ::modelfs::testing::TempDir;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kNamespace[] = "k8s.io";
constexpr char kRegistry[] = "registry.test:5000";

// What the snapshotter asked of the kernel, one line per call, in order.
class MountCalls {
 public:
  void Add(const std::string& call) {
    absl::MutexLock lock(&mu_);
    calls_.push_back(call);
  }
  std::vector<std::string> Get() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  void Clear() {
    absl::MutexLock lock(&mu_);
    calls_.clear();
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> calls_ ABSL_GUARDED_BY(mu_);
};

class FakeMount final : public ModelMount {
 public:
  FakeMount(std::shared_ptr<ModelTree> tree, MountCalls* calls)
      : tree_(std::move(tree)), calls_(calls) {}
  absl::Status RemoveModel(const std::string& model_name) override {
    RETURN_IF_ERROR(tree_->RemoveModel(model_name));
    calls_->Add("remove " + model_name);
    return absl::OkStatus();
  }
  absl::Status Unmount() override {
    calls_->Add("unmount");
    return absl::OkStatus();
  }
  absl::Status Detach() override {
    calls_->Add("detach");
    return absl::OkStatus();
  }
  absl::Status Wait() override { return absl::OkStatus(); }
  int fuse_fd() const override { return -1; }

 private:
  std::shared_ptr<ModelTree> tree_;
  MountCalls* const calls_;
};

class FakeMounter final : public ModelMounter {
 public:
  FakeMounter(MountCalls* calls, absl::Status mount_result, absl::Status adopt_result)
      : calls_(calls), mount_result_(mount_result), adopt_result_(adopt_result) {}
  absl::Status DetachStaleMount(const std::string& dir) override {
    calls_->Add("detach-stale " + dir);
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<ModelMount>> Mount(const std::string& dir,
                                                    std::shared_ptr<ModelTree> tree,
                                                    const FuseMountOptions& options) override {
    calls_->Add("mount " + dir);
    RETURN_IF_ERROR(mount_result_);
    return std::make_unique<FakeMount>(std::move(tree), calls_);
  }
  absl::StatusOr<std::unique_ptr<ModelMount>> Adopt(int fuse_fd, const std::string& dir,
                                                    std::shared_ptr<ModelTree> tree,
                                                    const FuseMountOptions& options) override {
    calls_->Add("adopt " + dir);
    RETURN_IF_ERROR(adopt_result_);
    return std::make_unique<FakeMount>(std::move(tree), calls_);
  }
  void LazyUnmount(const std::string& dir) override { calls_->Add("lazy-unmount " + dir); }

 private:
  MountCalls* const calls_;
  const absl::Status mount_result_;
  const absl::Status adopt_result_;
};

// The test's content store, whose reads wait while the gate is closed (counting the reads
// waiting), so a Prepare can be held in the middle.
class GatedContentStore final : public ContentStore {
 public:
  explicit GatedContentStore(ContentStore* inner) : inner_(inner) {}
  absl::StatusOr<uint64_t> Size(const std::string& ns, const Digest& digest) override {
    return inner_->Size(ns, digest);
  }
  absl::StatusOr<std::vector<std::string>> ImageNames(const std::string& ns,
                                                      const Digest& digest) override {
    return inner_->ImageNames(ns, digest);
  }
  absl::Status Read(const std::string& ns, const Digest& digest, uint64_t offset, uint64_t length,
                    absl::Time deadline,
                    const std::function<absl::Status(std::string_view)>& sink) override {
    {
      absl::MutexLock lock(&mu_);
      waiting_++;
      mu_.Await(absl::Condition(&open_));
      waiting_--;
    }
    return inner_->Read(ns, digest, offset, length, deadline, sink);
  }
  void Close() {
    absl::MutexLock lock(&mu_);
    open_ = false;
  }
  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }
  void AwaitAReadWaiting() {
    absl::MutexLock lock(&mu_);
    auto waiting = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return waiting_ > 0; };
    mu_.Await(absl::Condition(&waiting));
  }

 private:
  ContentStore* const inner_;
  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = true;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
};

// The key containerd 2.1 prepares an image volume of `image` under, for pod sandbox `sandbox`.
std::string VolumeKey(const Digest& image, char sandbox = 'b') {
  return absl::StrCat(kNamespace, "/7//run/containerd/io.containerd.grpc.v1.cri/image-volumes/",
                      std::string(64, sandbox), "/", std::string(image.hex()));
}

std::string ModelName(const Digest& m) { return "sha256-" + std::string(m.hex()); }

class ModelSnapshotterTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (release_registry_ != nullptr && !release_registry_->HasBeenNotified()) {
      release_registry_->Notify();
    }
    Close();
  }

  fs::path root() const { return tmp_.Join("root"); }
  std::string mnt() const { return (root() / "mnt").string(); }

  ModelSnapshotterOptions Options() {
    ModelSnapshotterOptions o;
    o.root = root();
    o.prefetch = PrefetchPolicy::kNone;
    o.log = [this](const log::Event& e) {
      absl::MutexLock lock(&log_mu_);
      log_.push_back(log::FormatLine(e, absl::UnixEpoch(), log::Format::kLogfmt));
    };
    return o;
  }

  absl::Status Open(ModelSnapshotterOptions o) {
    ModelSnapshotterParts parts;
    parts.clock = &clock_;
    ASSIGN_OR_RETURN(parts.base, OverlaySnapshotter::Open(o.root));
    parts.content_store = &gated_;
    ContentStoreReaderOptions ro;
    ro.clock = &clock_;
    parts.content_reader = std::make_unique<ContentStoreBlobReader>(&gated_, ro);
    // The real host over a fake mounter, a registry that cannot be reached and a real cache.
    ModelHostParts host;
    host.mounter = std::make_unique<FakeMounter>(&calls_, mount_result_, adopt_result_);
    host.source = std::make_unique<RegistryRoutingSource>();
    CacheOptions co;
    co.dir = (o.root / "cache").string();
    fs::create_directories(co.dir);
    ASSIGN_OR_RETURN(host.cache, BlobCache::Open(co, host.source.get()));
    host.preferred = parts.content_reader.get();
    host.connect_registry =
        [this](const std::string& registry) -> absl::StatusOr<std::shared_ptr<RegistryClient>> {
      {
        absl::MutexLock lock(&log_mu_);
        connected_.push_back(registry);
      }
      if (release_registry_ != nullptr) release_registry_->WaitForNotification();
      return absl::UnavailableError(absl::StrCat("registry ", registry, " is unreachable"));
    };
    ModelHostOptions ho;
    ho.prefetch = o.prefetch;
    ho.records = o.root / "models";
    ASSIGN_OR_RETURN(parts.host, ModelHost::Create(std::move(ho), std::move(host)));
    ASSIGN_OR_RETURN(snapshotter_, ModelSnapshotter::Create(std::move(o), std::move(parts)));
    return absl::OkStatus();
  }
  absl::Status Open() { return Open(Options()); }

  void Close() {
    if (snapshotter_) {
      EXPECT_OK(snapshotter_->Shutdown());
    }
    snapshotter_.reset();
  }

  // M as containerd's content store holds it after a pull: config.json as a raw layer,
  // README.md in a tar layer (tar_layer_, which registration reads whole), its config and its
  // manifest.
  Digest StoreModel() {
    std::vector<ModelLayerInput> layers;
    ModelLayerInput raw;
    raw.path = "config.json";
    raw.kind = ClassifyFile(raw.path);
    const std::string config_file = R"({"model_type":"llama"})";
    raw.digest = store_.Add(kNamespace, config_file);
    raw.size = config_file.size();
    layers.push_back(raw);
    ModelLayerInput tar;
    tar.path = "README.md";
    tar.kind = ClassifyFile(tar.path);
    tar.encoding = LayerEncoding::kTar;
    TarWriter writer;
    EXPECT_OK(writer.AddFile(tar.path, "# a test model\n"));
    const std::string tar_bytes = writer.Finish();
    tar_layer_ = store_.Add(kNamespace, tar_bytes);
    tar.digest = tar_layer_;
    tar.size = tar_bytes.size();
    layers.push_back(tar);
    ModelPackConfig config;
    config.descriptor.name = "state machine test";
    config_json_ = SerializeModelPackConfig(config);
    store_.Add(kNamespace, config_json_);
    absl::StatusOr<Manifest> m = BuildModelManifest(config_json_, layers);
    EXPECT_OK(m.status());
    return m.ok() ? store_.Add(kNamespace, SerializeManifest(*m)) : Digest();
  }

  // The labels containerd's CRI pull sends with the Prepare of volume image V's layer A.
  Labels VolumeLayerLabels(const std::string& target) {
    Descriptor model{std::string(kOciManifestMediaType), Digest::Of("model manifest"), 1234};
    Labels labels = MakeVolumeLabels(model, "models/m");
    labels[kLabelTargetRef] = target;
    labels[kLabelCriImageRef] = absl::StrCat(kRegistry, "/models/m-volume:v1");
    labels[kLabelCriManifestDigest] = Digest::Of("volume manifest").str();
    return labels;
  }

  // A committed snapshot `chain` served by model `name` from a registry, as a remote Prepare
  // leaves it in the metadata store, written before the snapshotter opens.
  void CommitRemoteModelSnapshot(const std::string& chain, const std::string& name) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<OverlaySnapshotter> base,
                         OverlaySnapshotter::Open(root()));
    ASSERT_OK(base->Prepare("extract-" + chain, "", {}).status());
    ASSERT_OK(base->Commit(chain, "extract-" + chain, {{kLabelRemoteModel, name}}));
  }

  // Opens after a restart with committed snapshot `chain` served by a model from a registry
  // whose registration is still going on: its record is there (M as resolved from the content
  // store, whose reference names the registry "containerd.invalid"), and the registry connector
  // holds the restorer until release_registry_ is notified. registering_ names the model.
  void OpenWithAModelStillRegistering(const std::string& chain) {
    const Digest m = StoreModel();
    registering_ = ModelName(m);
    ASSERT_OK_AND_ASSIGN(ResolvedModel rm,
                         ResolveContentStoreModel(store_, *ParseImageVolumeKey(VolumeKey(m))));
    ASSERT_OK(SaveModelRecord(root() / "models", registering_, rm));
    CommitRemoteModelSnapshot(chain, registering_);
    release_registry_ = std::make_unique<absl::Notification>();
    ModelSnapshotterOptions o = Options();
    o.model_wait = absl::Minutes(5);
    ASSERT_OK(Open(std::move(o)));
  }

  int CountLog(const std::string& needle) {
    absl::MutexLock lock(&log_mu_);
    int n = 0;
    for (const std::string& line : log_) n += line.find(needle) != std::string::npos;
    return n;
  }
  std::vector<std::string> Connected() {
    absl::MutexLock lock(&log_mu_);
    return connected_;
  }

  TempDir tmp_;
  FakeClock clock_;
  FakeContentStore store_;
  GatedContentStore gated_{&store_};
  MountCalls calls_;
  absl::Status mount_result_;
  absl::Status adopt_result_;
  // Set: the registry connector waits for it before failing.
  std::unique_ptr<absl::Notification> release_registry_;
  std::string config_json_;
  Digest tar_layer_;
  std::string registering_;
  std::unique_ptr<ModelSnapshotter> snapshotter_;
  absl::Mutex log_mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(log_mu_);
  std::vector<std::string> connected_ ABSL_GUARDED_BY(log_mu_);
};

// --- The FUSE mount of <root>/mnt ---

TEST_F(ModelSnapshotterTest, OpeningClearsAStaleMountThenMountsTheModelTreeOnce) {
  ASSERT_OK(Open());
  EXPECT_THAT(calls_.Get(), ElementsAre("detach-stale " + mnt(), "mount " + mnt()));
}

TEST_F(ModelSnapshotterTest, AFailedMountFailsTheOpenWithTheMountersError) {
  mount_result_ = absl::UnavailableError("no /dev/fuse here");
  EXPECT_EQ(Open(), absl::UnavailableError("no /dev/fuse here"));
}

TEST_F(ModelSnapshotterTest, AnInheritedConnectionIsAdoptedNotMountedAgain) {
  ModelSnapshotterOptions o = Options();
  o.inherited_fuse_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(o.inherited_fuse_fd, 0);
  const int fd = o.inherited_fuse_fd;
  ASSERT_OK(Open(std::move(o)));
  EXPECT_THAT(calls_.Get(), ElementsAre("adopt " + mnt()));
  ::close(fd);
}

TEST_F(ModelSnapshotterTest, AnInheritedConnectionThatCannotBeResumedIsUnmountedAndMountedAfresh) {
  adopt_result_ = absl::UnavailableError("the connection is gone");
  ModelSnapshotterOptions o = Options();
  o.inherited_fuse_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(o.inherited_fuse_fd, 0);
  ASSERT_OK(Open(std::move(o)));
  EXPECT_THAT(calls_.Get(),
              ElementsAre("adopt " + mnt(), "lazy-unmount " + mnt(), "mount " + mnt()));
}

TEST_F(ModelSnapshotterTest, ShutdownUnmountsTheModelTree) {
  ASSERT_OK(Open());
  calls_.Clear();
  ASSERT_OK(snapshotter_->Shutdown());
  EXPECT_THAT(calls_.Get(), ElementsAre("unmount"));
}

TEST_F(ModelSnapshotterTest, ShutdownKeepingTheMountDetachesInsteadOfUnmounting) {
  ASSERT_OK(Open());
  calls_.Clear();
  ASSERT_OK(snapshotter_->Shutdown(/*keep_mount=*/true));
  EXPECT_THAT(calls_.Get(), ElementsAre("detach"));
}

TEST_F(ModelSnapshotterTest, OpeningWithoutAMounterIsInvalid) {
  ModelSnapshotterParts parts;
  EXPECT_THAT(ModelSnapshotter::Create(Options(), std::move(parts)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// --- Prepare and Remove of a model (an image volume served from the content store) ---

TEST_F(ModelSnapshotterTest, PreparingAModelReturnsAReadOnlyBindOfItsDirectory) {
  const Digest m = StoreModel();
  ASSERT_OK(Open());
  ASSERT_OK_AND_ASSIGN(std::vector<Mount> mounts, snapshotter_->Prepare(VolumeKey(m), "", {}));
  EXPECT_EQ(mounts,
            (std::vector<Mount>{{"bind", mnt() + "/" + ModelName(m), "", {"ro", "rbind"}}}));
}

TEST_F(ModelSnapshotterTest, PreparingAModelRegistersItInTheMountedTree) {
  const Digest m = StoreModel();
  ASSERT_OK(Open());
  ASSERT_OK(snapshotter_->Prepare(VolumeKey(m), "", {}).status());
  EXPECT_THAT(snapshotter_->ActiveModels(), ElementsAre(ModelName(m)));
}

TEST_F(ModelSnapshotterTest, ASecondSnapshotOfTheSameModelSharesItsRegistration) {
  const Digest m = StoreModel();
  ASSERT_OK(Open());
  ASSERT_OK_AND_ASSIGN(std::vector<Mount> first, snapshotter_->Prepare(VolumeKey(m), "", {}));
  ASSERT_OK_AND_ASSIGN(std::vector<Mount> second, snapshotter_->Prepare(VolumeKey(m, 'c'), "", {}));
  EXPECT_EQ(second, first);
  EXPECT_EQ(CountLog(" registered at "), 1);
}

TEST_F(ModelSnapshotterTest, RemovingOneOfTwoSnapshotsOfAModelKeepsItMounted) {
  const Digest m = StoreModel();
  ASSERT_OK(Open());
  ASSERT_OK(snapshotter_->Prepare(VolumeKey(m), "", {}).status());
  ASSERT_OK(snapshotter_->Prepare(VolumeKey(m, 'c'), "", {}).status());
  calls_.Clear();
  ASSERT_OK(snapshotter_->Remove(VolumeKey(m)));
  EXPECT_THAT(calls_.Get(), IsEmpty());
  EXPECT_THAT(snapshotter_->ActiveModels(), ElementsAre(ModelName(m)));
}

TEST_F(ModelSnapshotterTest, RemovingTheLastSnapshotOfAModelTakesItOutOfTheMount) {
  const Digest m = StoreModel();
  ASSERT_OK(Open());
  ASSERT_OK(snapshotter_->Prepare(VolumeKey(m), "", {}).status());
  ASSERT_OK(snapshotter_->Prepare(VolumeKey(m, 'c'), "", {}).status());
  ASSERT_OK(snapshotter_->Remove(VolumeKey(m)));
  calls_.Clear();
  ASSERT_OK(snapshotter_->Remove(VolumeKey(m, 'c')));
  EXPECT_THAT(calls_.Get(), ElementsAre("remove " + ModelName(m)));
  EXPECT_THAT(snapshotter_->ActiveModels(), IsEmpty());
}

TEST_F(ModelSnapshotterTest, AModelWhoseLayerDoesNotMatchItsDigestIsRefused) {
  const Digest m = StoreModel();
  store_.Corrupt(kNamespace, tar_layer_, 0);
  ASSERT_OK(Open());
  EXPECT_THAT(snapshotter_->Prepare(VolumeKey(m), "", {}).status(),
              StatusIs(absl::StatusCode::kDataLoss));
}

TEST_F(ModelSnapshotterTest, ARefusedModelLeavesNoSnapshotAndNoModel) {
  const Digest m = StoreModel();
  store_.Corrupt(kNamespace, tar_layer_, 0);
  ASSERT_OK(Open());
  ASSERT_FALSE(snapshotter_->Prepare(VolumeKey(m), "", {}).ok());
  EXPECT_THAT(snapshotter_->Stat(VolumeKey(m)).status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(snapshotter_->ActiveModels(), IsEmpty());
}

TEST_F(ModelSnapshotterTest, AModelThatFailedToRegisterIsRegisteredAfreshByTheNextPrepare) {
  const Digest m = StoreModel();
  store_.Corrupt(kNamespace, tar_layer_, 0);
  ASSERT_OK(Open());
  ASSERT_FALSE(snapshotter_->Prepare(VolumeKey(m), "", {}).ok());
  store_.Corrupt(kNamespace, tar_layer_, 0);  // the same bit flipped back
  ASSERT_OK(snapshotter_->Prepare(VolumeKey(m), "", {}).status());
  EXPECT_THAT(snapshotter_->ActiveModels(), ElementsAre(ModelName(m)));
}

TEST_F(ModelSnapshotterTest, AnImageVolumeContainerdDoesNotHoldIsAnOrdinaryEmptySnapshot) {
  ASSERT_OK(Open());
  const std::string key = VolumeKey(Digest::Of("nothing containerd holds"));
  ASSERT_OK(snapshotter_->Prepare(key, "", {}).status());
  ASSERT_OK_AND_ASSIGN(SnapshotInfo info, snapshotter_->Stat(key));
  EXPECT_THAT(info.labels, IsEmpty());
  EXPECT_THAT(snapshotter_->ActiveModels(), IsEmpty());
}

// --- The remote Prepare of a volume layer, from a registry ---

TEST_F(ModelSnapshotterTest, AVolumeLayerWhoseRegistryCannotBeReachedFailsUnavailableNamingIt) {
  ASSERT_OK(Open());
  EXPECT_THAT(snapshotter_->Prepare("extract-a", "", VolumeLayerLabels("chain-a")).status(),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr(absl::StrCat("cannot be reached on registry ", kRegistry)),
                             HasSubstr("registry.test:5000 is unreachable"))));
  EXPECT_EQ(snapshotter_->remote_counts().error, 1u);
  EXPECT_EQ(snapshotter_->remote_counts().fallback, 0u);
  EXPECT_THAT(Connected(), ElementsAre(kRegistry));
}

TEST_F(ModelSnapshotterTest, AVolumeLayerWhoseRegistryCannotBeReachedLeavesNothingBehind) {
  ASSERT_OK(Open());
  ASSERT_FALSE(snapshotter_->Prepare("extract-a", "", VolumeLayerLabels("chain-a")).ok());
  EXPECT_THAT(snapshotter_->Stat("extract-a").status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(snapshotter_->Stat("chain-a").status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(snapshotter_->ActiveModels(), IsEmpty());
  EXPECT_THAT(ListModelRecords(root() / "models"), IsEmpty());
}

// The kubelet retries a failed pull: each retry asks the registry again, none is answered from
// what the last one left.
TEST_F(ModelSnapshotterTest, ARetriedPrepareWhileTheRegistryIsStillDownAsksItAgain) {
  ASSERT_OK(Open());
  ASSERT_FALSE(snapshotter_->Prepare("extract-a", "", VolumeLayerLabels("chain-a")).ok());
  EXPECT_THAT(snapshotter_->Prepare("extract-b", "", VolumeLayerLabels("chain-a")).status(),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(Connected(), ElementsAre(kRegistry, kRegistry));
}

TEST_F(ModelSnapshotterTest, AVolumeLayerWithoutTheCriImageLabelNeverReachesARegistry) {
  ASSERT_OK(Open());
  Labels labels = VolumeLayerLabels("chain-a");
  labels.erase(kLabelCriImageRef);
  ASSERT_OK(snapshotter_->Prepare("extract-a", "", labels).status());
  EXPECT_EQ(snapshotter_->remote_counts().fallback, 1u);
  EXPECT_THAT(Connected(), IsEmpty());
}

TEST_F(ModelSnapshotterTest, WithoutThePinnedDigestLabelTheVolumeLayerIsUnpackedTheOrdinaryWay) {
  ASSERT_OK(Open());
  Labels labels = VolumeLayerLabels("chain-a");
  labels.erase(kLabelCriManifestDigest);
  ASSERT_OK(snapshotter_->Prepare("extract-a", "", labels).status());
  EXPECT_EQ(snapshotter_->remote_counts().fallback, 1u);
  EXPECT_EQ(CountLog("cri.manifest-digest"), 1);
}

TEST_F(ModelSnapshotterTest, WithoutTheCriLabelsAnExistingTargetAnswersAlreadyExists) {
  ASSERT_OK(Open());
  Labels labels = VolumeLayerLabels("chain-a");
  labels.erase(kLabelCriImageRef);
  ASSERT_OK(snapshotter_->Prepare("extract-a", "", labels).status());
  ASSERT_OK(snapshotter_->Commit("chain-a", "extract-a", labels));
  EXPECT_THAT(snapshotter_->Prepare("extract-b", "", labels).status(),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(Connected(), IsEmpty());
}

// What an earlier fallback left: the volume layer unpacked and committed under its chain ID.
TEST_F(ModelSnapshotterTest, AnUnpackedSnapshotOfTheTargetDoesNotAnswerALaterRemotePrepare) {
  ASSERT_OK(Open());
  Labels labels = VolumeLayerLabels("chain-a");
  labels.erase(kLabelCriImageRef);
  ASSERT_OK(snapshotter_->Prepare("extract-a", "", labels).status());
  ASSERT_OK(snapshotter_->Commit("chain-a", "extract-a", labels));
  EXPECT_THAT(snapshotter_->Prepare("extract-b", "", VolumeLayerLabels("chain-a")).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr(kRegistry)));
  EXPECT_THAT(Connected(), ElementsAre(kRegistry));
}

TEST_F(ModelSnapshotterTest, AnUnpackedSnapshotOfTheTargetInUseFailsTheRemotePrepareNamingIt) {
  ASSERT_OK(Open());
  Labels labels = VolumeLayerLabels("chain-a");
  labels.erase(kLabelCriImageRef);
  ASSERT_OK(snapshotter_->Prepare("extract-a", "", labels).status());
  ASSERT_OK(snapshotter_->Commit("chain-a", "extract-a", labels));
  ASSERT_OK(snapshotter_->Prepare("container-1", "chain-a", {}).status());
  EXPECT_THAT(snapshotter_->Prepare("extract-b", "", VolumeLayerLabels("chain-a")).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("\"chain-a\""), HasSubstr("1 snapshot(s) use it"),
                             HasSubstr("crictl rmi"))));
  EXPECT_THAT(Connected(), IsEmpty());
}

TEST_F(ModelSnapshotterTest, AVolumeLayerRefusedByThePolicyFailsThePrepare) {
  ModelSnapshotterOptions o = Options();
  o.policy = tmp_.WriteFile("policy.json", R"({"default":[{"type":"reject"}]})").string();
  ASSERT_OK(Open(std::move(o)));
  EXPECT_THAT(snapshotter_->Prepare("extract-a", "", VolumeLayerLabels("chain-a")).status(),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(snapshotter_->remote_counts().error, 1u);
}

TEST_F(ModelSnapshotterTest, AVolumeLayerRefusedByThePolicyLeavesNothingBehind) {
  ModelSnapshotterOptions o = Options();
  o.policy = tmp_.WriteFile("policy.json", R"({"default":[{"type":"reject"}]})").string();
  ASSERT_OK(Open(std::move(o)));
  ASSERT_FALSE(snapshotter_->Prepare("extract-a", "", VolumeLayerLabels("chain-a")).ok());
  EXPECT_THAT(snapshotter_->Stat("extract-a").status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(snapshotter_->Stat("chain-a").status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(snapshotter_->ActiveModels(), IsEmpty());
  EXPECT_THAT(ListModelRecords(root() / "models"), IsEmpty());
}

// require_equivalence: a volume image of a listed repository is refused at its remote Prepare
// unless an equivalence attestation is accepted; fail closed when the attestations cannot be
// fetched (this registry is unreachable), naming the image and the requirement.
TEST_F(ModelSnapshotterTest, AVolumeLayerOfARepositoryRequiringEquivalenceIsRefusedWithoutOne) {
  ModelSnapshotterOptions o = Options();
  o.require_equivalence = {absl::StrCat(kRegistry, "/models/*")};
  o.equivalence_keys = {tmp_.WriteFile("q.pub", testing::GenerateKey().public_pem).string()};
  ASSERT_OK(Open(std::move(o)));
  EXPECT_THAT(snapshotter_->Prepare("extract-a", "", VolumeLayerLabels("chain-a")).status(),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       AllOf(HasSubstr("models/m-volume:v1"), HasSubstr("require_equivalence"),
                             HasSubstr("fetch_failed"))));
  EXPECT_THAT(snapshotter_->ActiveModels(), IsEmpty());
}

TEST_F(ModelSnapshotterTest, ARepositoryTheRequirementDoesNotNameIsNotAskedForOne) {
  ModelSnapshotterOptions o = Options();
  o.require_equivalence = {absl::StrCat(kRegistry, "/quantized/*")};
  o.equivalence_keys = {tmp_.WriteFile("q.pub", testing::GenerateKey().public_pem).string()};
  ASSERT_OK(Open(std::move(o)));
  // As without the requirement: the unreachable registry is what fails the Prepare.
  EXPECT_THAT(snapshotter_->Prepare("extract-a", "", VolumeLayerLabels("chain-a")).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr(kRegistry)));
}

// --- Restart recovery ---

TEST_F(ModelSnapshotterTest, AfterARestartAModelSnapshotIsServedAgain) {
  const Digest m = StoreModel();
  ASSERT_OK(Open());
  ASSERT_OK(snapshotter_->Prepare(VolumeKey(m), "", {}).status());
  Close();
  ASSERT_OK(Open());
  ASSERT_OK_AND_ASSIGN(std::vector<Mount> mounts, snapshotter_->Mounts(VolumeKey(m)));
  EXPECT_EQ(mounts,
            (std::vector<Mount>{{"bind", mnt() + "/" + ModelName(m), "", {"ro", "rbind"}}}));
  EXPECT_THAT(snapshotter_->ActiveModels(), ElementsAre(ModelName(m)));
}

// A lazy image's model lists its tree from V's tar header records, checked against the layers
// before a byte is served (nobody pinned that V): after a restart it is the same.
TEST_F(ModelSnapshotterTest, AModelRecordKeepsThatItsTarHeaderRecordsAreUnpinned) {
  const Digest m = StoreModel();
  ASSERT_OK_AND_ASSIGN(ResolvedModel rm,
                       ResolveContentStoreModel(store_, *ParseImageVolumeKey(VolumeKey(m))));
  rm.tar_headers_unpinned = true;
  ASSERT_OK(SaveModelRecord(root() / "models", ModelName(m), rm));
  ASSERT_OK_AND_ASSIGN(ResolvedModel back, LoadModelRecord(root() / "models", ModelName(m)));
  EXPECT_TRUE(back.tar_headers_unpinned);
  rm.tar_headers_unpinned = false;
  fs::remove_all(root() / "models" / ModelName(m));
  ASSERT_OK(SaveModelRecord(root() / "models", ModelName(m), rm));
  ASSERT_OK_AND_ASSIGN(back, LoadModelRecord(root() / "models", ModelName(m)));
  EXPECT_FALSE(back.tar_headers_unpinned);
}

TEST_F(ModelSnapshotterTest, AModelRecordNoSnapshotUsesIsDeletedAtStart) {
  const fs::path stale = root() / "models" / ("sha256-" + std::string(64, 'a'));
  fs::create_directories(stale);
  ASSERT_OK(Open());
  EXPECT_FALSE(fs::exists(stale));
}

TEST_F(ModelSnapshotterTest, ASnapshotOfAModelThatCannotBeRegisteredAgainFailsItsUsers) {
  const std::string name = "sha256-" + std::string(64, 'c');
  CommitRemoteModelSnapshot("chain-c", name);
  ASSERT_OK(Open());
  ASSERT_TRUE(snapshotter_->WaitRestored(absl::Seconds(30)));
  const absl::Status missing = LoadModelRecord(root() / "models", name).status();
  EXPECT_EQ(snapshotter_->View("view-c", "chain-c", {}).status(),
            absl::UnavailableError(
                absl::StrCat("model ", name, " is not available: ", missing.ToString())));
}

TEST_F(ModelSnapshotterTest, ASnapshotOfAModelThatCannotBeRegisteredAgainIsKept) {
  const std::string name = "sha256-" + std::string(64, 'c');
  CommitRemoteModelSnapshot("chain-c", name);
  ASSERT_OK(Open());
  ASSERT_TRUE(snapshotter_->WaitRestored(absl::Seconds(30)));
  ASSERT_OK_AND_ASSIGN(SnapshotInfo info, snapshotter_->Stat("chain-c"));
  EXPECT_EQ(info.labels.at(kLabelRemoteModel), name);
  EXPECT_THAT(snapshotter_->ActiveModels(), IsEmpty());
}

TEST_F(ModelSnapshotterTest, AUseOfAModelStillRegisteringAfterARestartWaitsModelWaitOnTheClock) {
  ASSERT_NO_FATAL_FAILURE(OpenWithAModelStillRegistering("chain-m"));
  // The clock moves on until the View gives up; no real time passes for the 5 minutes.
  std::atomic<bool> done{false};
  std::thread ticker([&] {
    while (!done) {
      clock_.Advance(absl::Minutes(1));
      absl::SleepFor(absl::Milliseconds(5));
    }
  });
  absl::Status st = snapshotter_->View("view-m", "chain-m", {}).status();
  done = true;
  ticker.join();
  EXPECT_EQ(st, absl::DeadlineExceededError(absl::StrCat(
                    "model ", registering_, " is still being registered after a restart")));
}

TEST_F(ModelSnapshotterTest, AUseOfAModelStillRegisteringFailsWhenTheSnapshotterShutsDown) {
  ASSERT_NO_FATAL_FAILURE(OpenWithAModelStillRegistering("chain-m"));
  absl::Status st;
  std::thread user([&] { st = snapshotter_->View("view-m", "chain-m", {}).status(); });
  // Shutdown wakes the waiter at once, then joins the restorer, which the registry holds.
  std::thread stopper([&] { EXPECT_OK(snapshotter_->Shutdown()); });
  user.join();
  release_registry_->Notify();
  stopper.join();
  EXPECT_EQ(st, absl::UnavailableError("snapshotter is shutting down"));
}

}  // namespace
// The labels containerd's CRI pull sends with the Prepare of an index layer of V (below A).
Labels IndexLayerLabels(const std::string& target) {
  Labels labels;
  labels[std::string(kLabelRole)] = std::string(kVolumeRoleIndex);
  labels[kLabelTargetRef] = target;
  labels[kLabelCriImageRef] = absl::StrCat(kRegistry, "/models/m-volume:v1");
  labels[kLabelCriManifestDigest] = Digest::Of("volume manifest").str();
  return labels;
}

// A lower layer holds only what containerd would unpack: when it cannot be answered as remote
// (here the registry is down), it is unpacked the ordinary way, not failed.
TEST_F(ModelSnapshotterTest, ALowerLayerWhoseRegistryCannotBeReachedIsUnpackedTheOrdinaryWay) {
  ASSERT_OK(Open());
  ASSERT_OK(snapshotter_->Prepare("extract-i", "", IndexLayerLabels("chain-i")).status());
  ASSERT_OK_AND_ASSIGN(SnapshotInfo info, snapshotter_->Stat("extract-i"));
  EXPECT_EQ(info.kind, SnapshotKind::kActive);
  EXPECT_THAT(snapshotter_->Stat("chain-i").status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(Connected(), ElementsAre(kRegistry));
}

TEST_F(ModelSnapshotterTest, ALowerLayerWithoutTheCriLabelsNeverReachesARegistry) {
  ASSERT_OK(Open());
  Labels labels = IndexLayerLabels("chain-i");
  labels.erase(kLabelCriManifestDigest);
  ASSERT_OK(snapshotter_->Prepare("extract-i", "", labels).status());
  EXPECT_THAT(Connected(), IsEmpty());
}

// An empty snapshot answering V's lower layer stands for it only under V's next layer: any
// other layer, or a view, on top of it is refused rather than shown an empty directory.
TEST_F(ModelSnapshotterTest, NothingButTheVolumesNextLayerStandsOnARemoteLowerSnapshot) {
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<OverlaySnapshotter> base,
                         OverlaySnapshotter::Open(root()));
    ASSERT_OK(base->Prepare("extract-i", "", {}).status());
    ASSERT_OK(base->Commit("chain-i", "extract-i", {{kLabelRemoteLower, "sha256:v"}}));
  }
  ASSERT_OK(Open());
  EXPECT_THAT(snapshotter_->Prepare("extract-x", "chain-i", {}).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("lower layer")));
  EXPECT_THAT(snapshotter_->View("view-x", "chain-i", {}).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("sha256:v")));
}

// The labels containerd's CRI pull sends with the Prepare of an ordinary image's layer.
Labels PlainLayerLabels(const std::string& repository, const std::string& target) {
  Labels labels;
  labels[kLabelTargetRef] = target;
  labels[kLabelCriImageRef] = absl::StrCat(kRegistry, "/", repository, ":v1");
  labels[kLabelCriManifestDigest] = Digest::Of("image manifest").str();
  return labels;
}

// lazy_images never blocks an image: a listed one whose registry cannot be reached is unpacked
// as ever, and one not listed never reaches a registry.
TEST_F(ModelSnapshotterTest, AListedLazyImageWhoseRegistryIsDownIsUnpackedAsEver) {
  ModelSnapshotterOptions o = Options();
  o.lazy_images = {absl::StrCat(kRegistry, "/modelcars/*")};
  ASSERT_OK(Open(o));
  ASSERT_OK(snapshotter_->Prepare("extract-p", "", PlainLayerLabels("modelcars/llama", "chain-p"))
                .status());
  EXPECT_THAT(Connected(), ElementsAre(kRegistry));
  ASSERT_OK(snapshotter_->Prepare("extract-q", "", PlainLayerLabels("other/busybox", "chain-q"))
                .status());
  EXPECT_THAT(Connected(), ElementsAre(kRegistry));
  EXPECT_EQ(snapshotter_->remote_counts().mounted, 0u);
}

// A policy fails closed for lazy_images: a listed image it refuses fails its Prepare before any
// registry is asked for a volume image (so removing the referrer is no way around it), and an
// image of a repository not listed is none of the policy's business.
TEST_F(ModelSnapshotterTest, AListedImageThePolicyRefusesFailsItsPrepareInsteadOfBeingUnpacked) {
  ModelSnapshotterOptions o = Options();
  o.lazy_images = {absl::StrCat(kRegistry, "/modelcars/*")};
  o.policy = tmp_.WriteFile("policy.json", R"({"default":[{"type":"reject"}]})").string();
  ASSERT_OK(Open(std::move(o)));
  EXPECT_THAT(snapshotter_->Prepare("extract-p", "", PlainLayerLabels("modelcars/llama", "chain-p"))
                  .status(),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       AllOf(HasSubstr(absl::StrCat("image ", kRegistry, "/modelcars/llama")),
                             HasSubstr("rejected_by_policy"))));
  EXPECT_THAT(snapshotter_->Stat("extract-p").status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(snapshotter_->remote_counts().error, 1u);
  EXPECT_EQ(snapshotter_->policy_refusals().at("rejected_by_policy"), 1u);
  EXPECT_EQ(CountLog("not served lazily"), 0);  // refused before any volume image was looked for
  ASSERT_OK(snapshotter_->Prepare("extract-q", "", PlainLayerLabels("other/busybox", "chain-q"))
                .status());
}

TEST_F(ModelSnapshotterTest, WithUnpackRefusedAListedImageThePolicyRefusesIsUnpacked) {
  ModelSnapshotterOptions o = Options();
  o.lazy_images = {absl::StrCat(kRegistry, "/modelcars/*")};
  o.lazy_images_unpack_refused = true;
  o.policy = tmp_.WriteFile("policy.json", R"({"default":[{"type":"reject"}]})").string();
  ASSERT_OK(Open(std::move(o)));
  ASSERT_OK(snapshotter_->Prepare("extract-p", "", PlainLayerLabels("modelcars/llama", "chain-p"))
                .status());
  EXPECT_EQ(snapshotter_->remote_counts().mounted, 0u);
  EXPECT_EQ(snapshotter_->policy_refusals().at("rejected_by_policy"), 1u);
  EXPECT_EQ(CountLog("unpacking it (lazy_images_unpack_refused)"), 1);
  EXPECT_EQ(CountLog("not served lazily"), 0);  // no volume image was looked for
}

TEST_F(ModelSnapshotterTest, AListedImageThePolicyAcceptsIsLookedUpAsWithoutAPolicy) {
  ModelSnapshotterOptions o = Options();
  o.lazy_images = {absl::StrCat(kRegistry, "/modelcars/*")};
  o.policy =
      tmp_.WriteFile("policy.json", R"({"default":[{"type":"insecureAcceptAnything"}]})").string();
  ASSERT_OK(Open(std::move(o)));
  // The registry is down: looked up, then unpacked as ever.
  ASSERT_OK(snapshotter_->Prepare("extract-p", "", PlainLayerLabels("modelcars/llama", "chain-p"))
                .status());
  EXPECT_EQ(CountLog("not served lazily"), 1);
  EXPECT_EQ(snapshotter_->remote_counts().error, 0u);
}

TEST_F(ModelSnapshotterTest, WithoutLazyImagesAnOrdinaryLayerNeverReachesARegistry) {
  ASSERT_OK(Open());
  ASSERT_OK(snapshotter_->Prepare("extract-p", "", PlainLayerLabels("modelcars/llama", "chain-p"))
                .status());
  EXPECT_THAT(Connected(), IsEmpty());
}

// --- The admin verbs: Status and Evict (model_snapshotter_node.cc) ---

TEST_F(ModelSnapshotterTest, StatusListsAPreparedModelWithTheSnapshotAndSandboxHoldingIt) {
  const Digest m = StoreModel();
  ASSERT_OK(Open());
  ASSERT_OK(snapshotter_->Prepare(VolumeKey(m), "", {}).status());
  NodeStatus status = snapshotter_->Status();
  ASSERT_EQ(status.models.size(), 1u);
  const NodeModel& model = status.models[0];
  EXPECT_EQ(model.name, ModelName(m));
  EXPECT_EQ(model.model_digest, m.str());
  EXPECT_EQ(model.state, "ready");
  EXPECT_FALSE(model.prefetched);
  ASSERT_EQ(model.snapshots.size(), 1u);
  EXPECT_EQ(model.snapshots[0].key, VolumeKey(m));
  EXPECT_EQ(model.snapshots[0].kind, "active");
  EXPECT_EQ(model.snapshots[0].container, std::string(64, 'b'));
  EXPECT_FALSE(status.disk_full);
  EXPECT_THAT(status.layers, IsEmpty());
}

TEST_F(ModelSnapshotterTest, EvictRefusesAModelASnapshotHoldsNamingTheSnapshot) {
  const Digest m = StoreModel();
  ASSERT_OK(Open());
  ASSERT_OK(snapshotter_->Prepare(VolumeKey(m), "", {}).status());
  EXPECT_THAT(snapshotter_->Evict(m.str()).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr(m.str()), HasSubstr(VolumeKey(m)))));
  EXPECT_THAT(snapshotter_->ActiveModels(), ElementsAre(ModelName(m)));
  EXPECT_EQ(CountLog(" evicted"), 0);
}

TEST_F(ModelSnapshotterTest, EvictOfADigestNoModelHasIsNotFound) {
  ASSERT_OK(Open());
  EXPECT_THAT(snapshotter_->Evict(Digest::Of("nothing").str()).status(),
              StatusIs(absl::StatusCode::kNotFound));
}

// The race of `modelfs node evict` with a pod starting on the same model: an evict that comes
// while a Prepare is under way waits for it, then finds the snapshot holding the model and is
// refused; the model stays registered and the snapshot usable.
TEST_F(ModelSnapshotterTest, AnEvictDuringAPrepareOfTheModelWaitsForItThenIsRefused) {
  const Digest m = StoreModel();
  ASSERT_OK(Open());
  gated_.Close();
  absl::StatusOr<std::vector<Mount>> prepared;
  std::thread prepare([&] { prepared = snapshotter_->Prepare(VolumeKey(m), "", {}); });
  gated_.AwaitAReadWaiting();  // the Prepare is reading M from the content store
  std::atomic<bool> evict_done{false};
  absl::Status evicted;
  std::thread evict([&] {
    evicted = snapshotter_->Evict(m.str()).status();
    evict_done = true;
  });
  // The evict cannot pass the Prepare (a false pass here would only hide a bug, never fail a
  // correct tree).
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(evict_done.load());
  gated_.Open();
  prepare.join();
  evict.join();
  ASSERT_OK(prepared.status());
  EXPECT_THAT(evicted, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr(VolumeKey(m))));
  EXPECT_THAT(snapshotter_->ActiveModels(), ElementsAre(ModelName(m)));
  EXPECT_OK(snapshotter_->Mounts(VolumeKey(m)).status());
}

// The other order: an evict that finished first leaves nothing a later Prepare could trip on;
// the Prepare registers the model afresh.
TEST_F(ModelSnapshotterTest, APrepareAfterAnEvictRegistersTheModelAfresh) {
  const Digest m = StoreModel();
  ASSERT_OK(Open());
  ASSERT_OK(snapshotter_->Prepare(VolumeKey(m), "", {}).status());
  ASSERT_OK(snapshotter_->Remove(VolumeKey(m)));
  EXPECT_THAT(snapshotter_->Evict(m.str()).status(), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK(snapshotter_->Prepare(VolumeKey(m, 'c'), "", {}).status());
  EXPECT_THAT(snapshotter_->ActiveModels(), ElementsAre(ModelName(m)));
  EXPECT_EQ(CountLog(" registered at "), 2);
}

// The same exclusion for the Remove of a model's last snapshot (image GC while a pod starts
// on the same model): it waits for the Prepare under way, which then holds the model, so the
// model stays in the mount.
TEST_F(ModelSnapshotterTest, RemovingAModelsLastSnapshotWaitsForAPrepareOfItUnderWay) {
  const Digest m = StoreModel();
  ASSERT_OK(Open());
  ASSERT_OK(snapshotter_->Prepare(VolumeKey(m), "", {}).status());
  calls_.Clear();
  gated_.Close();
  absl::StatusOr<std::vector<Mount>> prepared;
  std::thread prepare([&] { prepared = snapshotter_->Prepare(VolumeKey(m, 'c'), "", {}); });
  gated_.AwaitAReadWaiting();
  std::atomic<bool> remove_done{false};
  absl::Status removed;
  std::thread remove([&] {
    removed = snapshotter_->Remove(VolumeKey(m));
    remove_done = true;
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(remove_done.load());
  gated_.Open();
  prepare.join();
  remove.join();
  ASSERT_OK(prepared.status());
  ASSERT_OK(removed);
  EXPECT_THAT(calls_.Get(), IsEmpty());  // the model never left the mount
  EXPECT_THAT(snapshotter_->ActiveModels(), ElementsAre(ModelName(m)));
  EXPECT_OK(snapshotter_->Mounts(VolumeKey(m, 'c')).status());
}

namespace {

// --- The snapshotter over a fake host: what it asks of the host, and nothing else ---

class ModelSnapshotterOverAFakeHostTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (snapshotter_) {
      EXPECT_OK(snapshotter_->Shutdown());
    }
  }

  absl::Status Open(std::unique_ptr<FakeModelService> host) {
    ModelSnapshotterOptions o;
    o.root = tmp_.Join("root");
    o.log = [](const log::Event&) {};
    ModelSnapshotterParts parts;
    parts.clock = &clock_;
    ASSIGN_OR_RETURN(parts.base, OverlaySnapshotter::Open(o.root));
    parts.host = std::move(host);
    ASSIGN_OR_RETURN(snapshotter_, ModelSnapshotter::Create(std::move(o), std::move(parts)));
    return absl::OkStatus();
  }
  std::string mnt() const { return (tmp_.Join("root") / "mnt").string(); }

  TempDir tmp_;
  FakeClock clock_;
  FakeModelService::Log log_;
  std::unique_ptr<ModelSnapshotter> snapshotter_;
};

TEST_F(ModelSnapshotterOverAFakeHostTest, TheMountAtStartAndShutdownGoThroughTheHost) {
  ASSERT_OK(Open(std::make_unique<FakeModelService>(&log_)));
  ASSERT_OK(snapshotter_->Shutdown());
  EXPECT_THAT(log_.Get(), ElementsAre("detach-stale " + mnt(), "mount " + mnt(), "unmount"));
}

TEST_F(ModelSnapshotterOverAFakeHostTest, RecordsNoSnapshotUsesAreDeletedThroughTheHost) {
  auto host = std::make_unique<FakeModelService>(&log_);
  host->SetRecord("sha256-" + std::string(64, 'a'), ResolvedModel{});
  ASSERT_OK(Open(std::move(host)));
  EXPECT_THAT(log_.Get(), ElementsAre("delete-record sha256-" + std::string(64, 'a'),
                                      "detach-stale " + mnt(), "mount " + mnt()));
}

TEST_F(ModelSnapshotterOverAFakeHostTest, CleanupEnforcesTheCachesBoundThroughTheHost) {
  ASSERT_OK(Open(std::make_unique<FakeModelService>(&log_)));
  ASSERT_OK(snapshotter_->Cleanup());
  EXPECT_EQ(log_.Get().back(), "enforce-cache-limit");
}

TEST_F(ModelSnapshotterOverAFakeHostTest, TheCacheCountersAreTheHosts) {
  auto host = std::make_unique<FakeModelService>(&log_);
  CacheStats stats;
  stats.bytes_fetched = 12345;
  host->SetCacheStats(stats);
  ASSERT_OK(Open(std::move(host)));
  EXPECT_EQ(snapshotter_->cache_stats().bytes_fetched, 12345u);
  EXPECT_FALSE(snapshotter_->cache_disk_full());
}

}  // namespace

}  // namespace modelfs::snapshotter
