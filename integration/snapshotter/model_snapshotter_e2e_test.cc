// ModelSnapshotter against a real docker-registry and the kernel's FUSE and overlayfs: the
// remote Prepare of a volume image's layer, the snapshots on top of it, the failures (and the
// one fallback, without CRI labels), and a restart that re-registers the model while the
// registry is down.
#include "snapshotter/model/model_snapshotter.h"

#include <sys/mount.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/oci/manifest.h"
#include "core/oci/media_types.h"
#include "core/oci/modelpack.h"
#include "core/oci/tar.h"
#include "core/oci/volume_image.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/compress.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::snapshotter {
namespace {

namespace fs = std::filesystem;
using ::modelfs::testing::DescribeFiles;
using ::modelfs::testing::ReadFileOrDie;
using ::modelfs::testing::RegistryFixture;
using ::modelfs::testing::StatusIs;
using ::modelfs::testing::TempDir;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class ModelSnapshotterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_OR_FAIL_IF_UNAVAILABLE(
        geteuid() != 0 || !fs::exists("/dev/fuse") ? "needs root and /dev/fuse" : "");
    modelfs::testing::RegistryFixtureOptions ro;
    ro.access_log = true;
    ASSERT_OK_AND_ASSIGN(registry_, RegistryFixture::Start(ro));
    model_dir_ = tmp_.Join("model");
    ASSERT_OK(modelfs::testing::WriteTestModel(model_dir_.string(), /*seed=*/41).status());
    ASSERT_OK_AND_ASSIGN(auto push, modelfs::testing::RunModelfs({"push", "--plain-http", Ref("v1"),
                                                                  model_dir_.string(), "--json"}));
    ASSERT_EQ(push.exit_code, 0) << push.err;
    nlohmann::json j = modelfs::testing::ParseJsonOutput(push.out);
    model_digest_ = j["model"]["digest"];
    volume_digest_ = j["volume"]["digest"];

    ASSERT_OK_AND_ASSIGN(auto client, modelfs::testing::ConnectPlainHttp(registry_->host_port()));
    ASSERT_OK_AND_ASSIGN(ManifestResult v, client->GetManifest(kRepo, volume_digest_));
    ASSERT_OK_AND_ASSIGN(Manifest vm, ParseManifest(v.bytes));
    ASSERT_EQ(vm.layers.size(), 1u);
    // One uncompressed layer: its chain ID is its diff ID, which is its digest.
    chain_id_ = vm.layers[0].digest.str();
    labels_ = Labels(vm.layers[0].annotations.begin(), vm.layers[0].annotations.end());
    labels_[kLabelTargetRef] = chain_id_;
    labels_[kLabelCriImageRef] = Ref("v1-volume");
    labels_[kLabelCriManifestDigest] = volume_digest_;
    labels_["containerd.io/snapshot/cri.layer-digest"] = chain_id_;
    ASSERT_OK(Open());
  }

  void TearDown() override {
    for (const std::string& m : mounted_) umount2(m.c_str(), MNT_DETACH);
    if (snapshotter_) (void)snapshotter_->Shutdown();
    snapshotter_.reset();
  }

  absl::Status Open(bool use_hosts_dir = false) {
    ModelSnapshotterOptions o;
    o.root = tmp_.Join("root");
    if (use_hosts_dir) {
      // containerd's certs.d layout, as a node shares it between containerd and modelfs.
      const std::string& r = registry_->host_port();
      fs::create_directories(tmp_.Join("certs.d/" + r));
      std::ofstream(tmp_.Join("certs.d/" + r + "/hosts.toml"))
          << "server = \"http://" << r << "\"\n[host.\"http://" << r
          << "\"]\n  capabilities = [\"pull\", \"resolve\"]\n";
      o.registry.hosts.certs_dir = tmp_.Join("certs.d").string();
    } else {
      o.registry.hosts.plain_http_hosts = {registry_->host_port()};
    }
    o.prefetch = prefetch_;
    o.log = [this](const log::Event& e) {
      log_ += log::FormatLine(e, absl::Now(), log::Format::kLogfmt) + "\n";
    };
    absl::StatusOr<std::unique_ptr<ModelSnapshotter>> s = ModelSnapshotter::Open(o);
    if (!s.ok()) return s.status();
    snapshotter_ = *std::move(s);
    return absl::OkStatus();
  }

  std::string Ref(const std::string& tag) const {
    return absl::StrCat(registry_->host_port(), "/", kRepo, ":", tag);
  }
  std::string ModelName() const { return "sha256-" + model_digest_.substr(7); }

  // Mounts what a Prepare or View returned at a fresh directory.
  absl::StatusOr<std::string> MountAll(const std::vector<Mount>& mounts) {
    if (mounts.size() != 1) return absl::InternalError("want one mount");
    const Mount& m = mounts[0];
    std::string target = tmp_.Join(absl::StrCat("mnt", mounted_.size())).string();
    fs::create_directories(target);
    std::string data;
    unsigned long flags = 0;
    for (const std::string& o : m.options) {
      if (o == "ro")
        flags |= MS_RDONLY;
      else if (o == "rbind")
        flags |= MS_BIND | MS_REC;
      else if (o == "rw")
        continue;
      else
        data += (data.empty() ? "" : ",") + o;
    }
    if (::mount(m.source.c_str(), target.c_str(), m.type.c_str(), flags & ~MS_RDONLY,
                data.c_str()) != 0) {
      return absl::InternalError(absl::StrCat("mount ", m.type, ": ", strerror(errno)));
    }
    if ((flags & MS_BIND) && (flags & MS_RDONLY)) {
      ::mount("", target.c_str(), "", MS_BIND | MS_REMOUNT | MS_RDONLY, nullptr);
    }
    mounted_.push_back(target);
    return target;
  }

  // Pushes a hand-built model M (one layer per {descriptor, bytes}; the descriptor's size is
  // kept as given, so it may lie) and its volume image V under `tag`; returns the labels a CRI
  // pull of V passes to Prepare for V's layer.
  Labels PushHandBuiltVolume(const std::string& tag,
                             std::vector<std::pair<Descriptor, std::string>> layers) {
    absl::StatusOr<std::unique_ptr<RegistryClient>> client =
        modelfs::testing::ConnectPlainHttp(registry_->host_port());
    EXPECT_OK(client.status());
    if (!client.ok()) return {};
    ModelPackConfig config;
    config.descriptor.name = "hand-built";
    Manifest m;
    m.media_type = std::string(kOciManifestMediaType);
    m.artifact_type = std::string(kModelArtifactType);
    for (auto& [d, bytes] : layers) {
      absl::StatusOr<Digest> ld = modelfs::testing::UploadBlob(**client, kRepo, bytes);
      EXPECT_OK(ld.status());
      if (ld.ok()) d.digest = *ld;
      config.modelfs.diff_ids.push_back(d.digest);
      m.layers.push_back(d);
    }
    const std::string config_json = SerializeModelPackConfig(config);
    EXPECT_OK(modelfs::testing::UploadBlob(**client, kRepo, config_json).status());
    m.config = DescribeBlob(kModelConfigMediaType, config_json);
    const std::string m_json = SerializeManifest(m);
    Descriptor m_desc = DescribeBlob(kOciManifestMediaType, m_json);
    m_desc.artifact_type = std::string(kModelArtifactType);
    EXPECT_OK(
        (*client)
            ->PutManifest(kRepo, m_desc.digest.str(), m_json, std::string(kOciManifestMediaType))
            .status());
    // V by hand, as BuildVolumeImage would write it (which refuses the hostile M): layer A
    // with model.json, an image config naming A, and A's modelfs annotations.
    const std::string repository = absl::StrCat(registry_->host_port(), "/", kRepo);
    VolumeModelInfo info;
    info.manifest = m_desc;
    info.repository = repository;
    for (const Descriptor& d : m.layers) {
      const std::string* path = d.Annotation(kAnnotationFilepath);
      info.layers.push_back({d.digest, d.size, d.media_type, path ? *path : "", std::nullopt});
    }
    TarWriter tar;
    EXPECT_OK(tar.AddDirectory(".modelfs"));
    EXPECT_OK(tar.AddFile(".modelfs/model.json", SerializeVolumeModelJson(info)));
    const std::string a = tar.Finish();
    Descriptor a_desc = DescribeBlob(kOciLayerTarMediaType, a);
    for (const auto& [k, val] : MakeVolumeLabels(m_desc, repository)) a_desc.annotations[k] = val;
    const std::string v_config =
        nlohmann::json{{"architecture", "amd64"},
                       {"os", "linux"},
                       {"rootfs", {{"type", "layers"}, {"diff_ids", {a_desc.digest.str()}}}}}
            .dump();
    Manifest v;
    v.media_type = std::string(kOciManifestMediaType);
    v.config = DescribeBlob(kOciConfigMediaType, v_config);
    v.layers = {a_desc};
    v.subject = m_desc;
    const std::string v_json = SerializeManifest(v);
    EXPECT_OK(modelfs::testing::UploadBlob(**client, kRepo, a).status());
    EXPECT_OK(modelfs::testing::UploadBlob(**client, kRepo, v_config).status());
    EXPECT_OK(
        (*client)->PutManifest(kRepo, tag, v_json, std::string(kOciManifestMediaType)).status());
    Labels labels(a_desc.annotations.begin(), a_desc.annotations.end());
    labels[kLabelTargetRef] = a_desc.digest.str();
    labels[kLabelCriImageRef] = Ref(tag);
    labels[kLabelCriManifestDigest] = Digest::Of(v_json).str();
    labels["containerd.io/snapshot/cri.layer-digest"] = a_desc.digest.str();
    return labels;
  }

  static constexpr char kRepo[] = "snap/llama";
  TempDir tmp_;
  std::unique_ptr<RegistryFixture> registry_;
  fs::path model_dir_;
  std::string model_digest_;
  std::string volume_digest_;
  std::string chain_id_;
  Labels labels_;
  std::string log_;
  std::vector<std::string> mounted_;
  PrefetchPolicy prefetch_ = PrefetchPolicy::kNone;  // for the next Open
  std::unique_ptr<ModelSnapshotter> snapshotter_;
};

TEST_F(ModelSnapshotterTest, PrepareOfAVolumeLayerCommitsTheChainIdAndAnswersAlreadyExists) {
  EXPECT_THAT(snapshotter_->Prepare("k8s.io/1/extract-1 " + chain_id_, "", labels_).status(),
              StatusIs(absl::StatusCode::kAlreadyExists));
  ASSERT_OK_AND_ASSIGN(SnapshotInfo info, snapshotter_->Stat(chain_id_));
  EXPECT_EQ(info.kind, SnapshotKind::kCommitted);
  EXPECT_EQ(info.parent, "");
  EXPECT_EQ(info.labels[kLabelRemoteModel], ModelName());
  EXPECT_EQ(info.labels[kLabelTargetRef], chain_id_);
  EXPECT_THAT(snapshotter_->Stat("k8s.io/1/extract-1 " + chain_id_).status(),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(snapshotter_->ActiveModels(), ElementsAre(ModelName()));
  EXPECT_EQ(snapshotter_->remote_counts().mounted, 1u);
}

TEST_F(ModelSnapshotterTest, ContainerdsTargetWalkFindsTheCommittedModelSnapshot) {
  ASSERT_THAT(snapshotter_->Prepare("extract-1", "", labels_).status(),
              StatusIs(absl::StatusCode::kAlreadyExists));
  // The filter containerd's metadata snapshotter uses after ALREADY_EXISTS.
  std::vector<std::string> names;
  ASSERT_OK(snapshotter_->Walk(
      {absl::StrCat("labels.\"containerd.io/snapshot.ref\"==", chain_id_, ",parent==\"\"")},
      [&](const SnapshotInfo& i) {
        names.push_back(i.name);
        return absl::OkStatus();
      }));
  EXPECT_THAT(names, ElementsAre(chain_id_));
}

TEST_F(ModelSnapshotterTest, ASecondPrepareOfTheSameChainAnswersAlreadyExistsAtOnce) {
  ASSERT_THAT(snapshotter_->Prepare("extract-1", "", labels_).status(),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(snapshotter_->Prepare("extract-2", "", labels_).status(),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(snapshotter_->Stat("extract-2").status(), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ModelSnapshotterTest, AViewOnTheModelIsAReadOnlyBindOfItsDirectoryWithExactBytes) {
  ASSERT_THAT(snapshotter_->Prepare("extract-1", "", labels_).status(),
              StatusIs(absl::StatusCode::kAlreadyExists));
  ASSERT_OK_AND_ASSIGN(std::vector<Mount> mounts, snapshotter_->View("vol-1", chain_id_, {}));
  const std::string model_mnt = (snapshotter_->mount_dir() / ModelName()).string();
  EXPECT_THAT(mounts, ElementsAre(Mount{"bind", model_mnt, "", {"ro", "rbind"}}));
  ASSERT_OK_AND_ASSIGN(std::string dir, MountAll(mounts));
  std::map<std::string, std::string> got = DescribeFiles(dir);
  ASSERT_TRUE(got.count(".modelinfo.json"));
  nlohmann::json info = nlohmann::json::parse(ReadFileOrDie(dir + "/.modelinfo.json"));
  EXPECT_EQ(info["digests"]["manifest"], model_digest_);
  got.erase(".modelinfo.json");
  EXPECT_EQ(got, DescribeFiles(model_dir_.string()));
}

TEST_F(ModelSnapshotterTest, AnActiveSnapshotOnTheModelIsAnOverlayThatKeepsWritesInItsUpper) {
  ASSERT_THAT(snapshotter_->Prepare("extract-1", "", labels_).status(),
              StatusIs(absl::StatusCode::kAlreadyExists));
  ASSERT_OK_AND_ASSIGN(std::vector<Mount> mounts, snapshotter_->Prepare("ctr-1", chain_id_, {}));
  ASSERT_EQ(mounts.size(), 1u);
  EXPECT_EQ(mounts[0].type, "overlay");
  const std::string model_mnt = (snapshotter_->mount_dir() / ModelName()).string();
  EXPECT_THAT(mounts[0].options, Contains("lowerdir=" + model_mnt));
  ASSERT_OK_AND_ASSIGN(std::string dir, MountAll(mounts));
  std::map<std::string, std::string> want = DescribeFiles(model_dir_.string());
  std::map<std::string, std::string> got = DescribeFiles(dir);
  for (const auto& [path, digest] : want) EXPECT_EQ(got[path], digest) << path;
  std::ofstream(fs::path(dir) / "scratch.txt") << "written by the container";
  EXPECT_FALSE(fs::exists(fs::path(model_mnt) / "scratch.txt"));
  EXPECT_EQ(ReadFileOrDie(dir + "/scratch.txt"), "written by the container");
}

TEST_F(ModelSnapshotterTest, WithoutTheCriImageReferenceItFallsBackToAnOrdinarySnapshot) {
  Labels labels = labels_;
  labels.erase(kLabelCriImageRef);
  ASSERT_OK_AND_ASSIGN(std::vector<Mount> mounts, snapshotter_->Prepare("extract-1", "", labels));
  ASSERT_EQ(mounts.size(), 1u);
  EXPECT_EQ(mounts[0].type, "bind");
  ASSERT_OK_AND_ASSIGN(SnapshotInfo info, snapshotter_->Stat("extract-1"));
  EXPECT_EQ(info.kind, SnapshotKind::kActive);
  EXPECT_EQ(snapshotter_->remote_counts().fallback, 1u);
  EXPECT_THAT(snapshotter_->ActiveModels(), IsEmpty());
  EXPECT_THAT(log_, HasSubstr("cri.image-ref"));
}

// Snapshot poisoning: the labels of a volume layer with the chain ID of another image's layer
// as target. The model must not be committed under that chain ID, nor the layer unpacked: the
// Prepare fails.
TEST_F(ModelSnapshotterTest, ATargetThatIsNotTheVolumeLayersChainIdFailsThePrepare) {
  const std::string base_chain = Digest::Of("a common base layer").str();
  Labels labels = labels_;
  labels[kLabelTargetRef] = base_chain;
  EXPECT_THAT(snapshotter_->Prepare("extract-1", "", labels).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("does not bind")));
  EXPECT_THAT(snapshotter_->Stat(base_chain).status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(snapshotter_->Stat("extract-1").status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(snapshotter_->ActiveModels(), IsEmpty());
  EXPECT_EQ(snapshotter_->remote_counts().mounted, 0u);
  EXPECT_EQ(snapshotter_->remote_counts().error, 1u);
}

TEST_F(ModelSnapshotterTest, AParentBelowTheVolumeLayerThatItsConfigDoesNotListFailsThePrepare) {
  ASSERT_OK(snapshotter_->Prepare("base-extract", "", {}).status());
  const std::string base = Digest::Of("base").str();
  ASSERT_OK(snapshotter_->Commit(base, "base-extract", {}));
  Labels labels = labels_;
  labels[kLabelTargetRef] = Digest::Of(base + " " + chain_id_).str();
  EXPECT_THAT(snapshotter_->Prepare("extract-1", base, labels).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("parent snapshot")));
  EXPECT_THAT(snapshotter_->Stat(labels[kLabelTargetRef]).status(),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(snapshotter_->ActiveModels(), IsEmpty());
}

TEST_F(ModelSnapshotterTest, WithoutThePinnedManifestDigestItFallsBackToAnOrdinarySnapshot) {
  Labels labels = labels_;
  labels.erase(kLabelCriManifestDigest);
  ASSERT_OK(snapshotter_->Prepare("extract-1", "", labels).status());
  EXPECT_THAT(snapshotter_->Stat(chain_id_).status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(snapshotter_->ActiveModels(), IsEmpty());
  EXPECT_THAT(log_, HasSubstr("cri.manifest-digest"));
}

TEST_F(ModelSnapshotterTest, ALayerAnnotationNamingAnotherModelIsDataLossAndLeavesNoSnapshot) {
  Labels labels = labels_;
  labels[std::string(kLabelModel)] = Digest::Of("another model").str();
  EXPECT_THAT(snapshotter_->Prepare("extract-1", "", labels).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(model_digest_)));
  EXPECT_THAT(snapshotter_->Stat(chain_id_).status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(snapshotter_->Stat("extract-1").status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(snapshotter_->remote_counts().error, 1u);
}

TEST_F(ModelSnapshotterTest, AModelThatFailsToLoadFailsThePrepareAndHoldsNoCacheReference) {
  // The raw layer is registered with the cache before the tar layer, shorter than one tar
  // header, makes the load fail.
  Descriptor raw{"application/vnd.cncf.model.doc.v1.raw", {}, 6, {}, {}};
  raw.annotations[std::string(kAnnotationFilepath)] = "notes.txt";
  Descriptor tar{"application/vnd.cncf.model.weight.v1.tar", {}, 10, {}, {}};
  Labels labels = PushHandBuiltVolume("fails-to-load", {{raw, "notes\n"}, {tar, "not a tar\n"}});
  EXPECT_FALSE(snapshotter_->Prepare("extract-1", "", labels).ok());
  EXPECT_EQ(snapshotter_->remote_counts().error, 1u);
  EXPECT_THAT(snapshotter_->ActiveModels(), IsEmpty());
  EXPECT_THAT(log_, HasSubstr("tar truncated"));
  absl::StatusOr<BlobCache::LayerInfo> info =
      snapshotter_->cache_layer_info(Digest::Of(std::string("notes\n")));
  EXPECT_EQ(info.ok() ? info->references : 0, 0);
}

TEST_F(ModelSnapshotterTest, AGzipTarLayerIsServedDecompressedWithExactBytes) {
  std::string weights(5 << 20, '\0');
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<char>((i * 7919) >> 3);
  TarWriter tar;
  ASSERT_OK(tar.AddFile("weights/model.bin", weights));
  const std::string gz = ::modelfs::testing::Gzip(tar.Finish());
  // The helper records each layer's own digest as its diffId, as some publishers do.
  Descriptor layer{"application/vnd.cncf.model.weight.v1.tar+gzip", {}, gz.size(), {}, {}};
  Labels labels = PushHandBuiltVolume("gzip-layer", {{layer, gz}});
  ASSERT_THAT(snapshotter_->Prepare("extract-1", "", labels).status(),
              StatusIs(absl::StatusCode::kAlreadyExists));
  ASSERT_EQ(snapshotter_->ActiveModels().size(), 1u);
  const std::string dir =
      (snapshotter_->mount_dir() / *snapshotter_->ActiveModels().begin()).string();
  EXPECT_EQ(ReadFileOrDie(dir + "/weights/model.bin"), weights);
  EXPECT_EQ(snapshotter_->remote_counts().mounted, 1u);
}

TEST_F(ModelSnapshotterTest, AGzipTarLayerWithASeekIndexIsServedLazilyWithExactBytes) {
  // M with one .tar+gzip layer of several 4 MiB checkpoints, and its V from `modelfs convert`
  // (a seek index and the chunk index of the tar): the daemon serves it span by span.
  std::string weights(10 << 20, '\0');
  uint32_t x = 41;
  for (size_t i = 0; i < weights.size(); ++i) {
    x = x * 1664525 + 1013904223;
    weights[i] = static_cast<char>(i % 2 ? 0x3c + (x >> 24) % 3 : x >> 24);
  }
  TarWriter tar;
  ASSERT_OK(tar.AddFile("weights/model.bin", weights));
  const std::string plain = tar.Finish();
  const std::string gz = ::modelfs::testing::Gzip(plain);
  ASSERT_OK_AND_ASSIGN(auto client, modelfs::testing::ConnectPlainHttp(registry_->host_port()));
  ASSERT_OK_AND_ASSIGN(Digest layer, modelfs::testing::UploadBlob(*client, kRepo, gz));
  ModelPackConfig config;
  config.modelfs.diff_ids = {Digest::Of(plain)};
  const std::string config_json = SerializeModelPackConfig(config);
  ASSERT_OK(modelfs::testing::UploadBlob(*client, kRepo, config_json).status());
  ModelLayerInput in;
  in.path = "weights";
  in.digest = layer;
  in.size = gz.size();
  in.kind = LayerKind::kWeight;
  in.encoding = LayerEncoding::kTarGzip;
  ASSERT_OK_AND_ASSIGN(Manifest m, BuildModelManifest(config_json, {in}));
  ASSERT_OK(
      client->PutManifest(kRepo, "gz", SerializeManifest(m), std::string(kOciManifestMediaType))
          .status());
  ASSERT_OK_AND_ASSIGN(
      auto conv, modelfs::testing::RunModelfs({"convert", "--plain-http", Ref("gz"), "--json"}));
  ASSERT_EQ(conv.exit_code, 0) << conv.err;
  const std::string v_digest = modelfs::testing::ParseJsonOutput(conv.out)["volume"]["digest"];
  ASSERT_OK_AND_ASSIGN(ManifestResult v, client->GetManifest(kRepo, v_digest));
  ASSERT_OK_AND_ASSIGN(Manifest vm, ParseManifest(v.bytes));
  Labels labels(vm.layers[0].annotations.begin(), vm.layers[0].annotations.end());
  labels[kLabelTargetRef] = vm.layers[0].digest.str();
  labels[kLabelCriImageRef] = Ref("gz-volume");
  labels[kLabelCriManifestDigest] = v_digest;
  ASSERT_THAT(snapshotter_->Prepare("extract-gz", "", labels).status(),
              StatusIs(absl::StatusCode::kAlreadyExists))
      << log_;
  const std::string m_name =
      "sha256-" +
      std::string(DescribeBlob(kOciManifestMediaType, SerializeManifest(m)).digest.hex());
  const std::string dir = (snapshotter_->mount_dir() / m_name).string();
  EXPECT_TRUE(ReadFileOrDie(dir + "/weights/model.bin") == weights);
  nlohmann::json info = nlohmann::json::parse(ReadFileOrDie(dir + "/.modelinfo.json"));
  EXPECT_EQ(info["layerServing"][layer.str()], "lazy-seek-index") << info.dump();
  EXPECT_EQ(info["verification"], "chunk-index") << info.dump();
}

TEST_F(ModelSnapshotterTest, AnAbsurdLayerSizeFailsNamingTheLayerAndTheNextPrepareToo) {
  Descriptor huge{"application/vnd.cncf.model.weight.v1.raw", {}, 9223372036854775807ull, {}, {}};
  huge.annotations[std::string(kAnnotationFilepath)] = "huge.bin";
  Labels labels = PushHandBuiltVolume("absurd-size", {{huge, "tiny\n"}});
  EXPECT_FALSE(snapshotter_->Prepare("extract-1", "", labels).ok());
  EXPECT_THAT(log_, HasSubstr(Digest::Of(std::string("tiny\n")).str()));
  EXPECT_THAT(log_, HasSubstr("9223372036854775807"));
  // Nothing was left half-registered: a second Prepare of the same layer fails the same way.
  EXPECT_FALSE(snapshotter_->Prepare("extract-2", "", labels).ok());
  EXPECT_EQ(snapshotter_->remote_counts().error, 2u);
  EXPECT_THAT(snapshotter_->ActiveModels(), IsEmpty());
}

TEST_F(ModelSnapshotterTest, WhenTheRegistryIsDownThePrepareIsUnavailableNamingIt) {
  registry_->Stop();
  EXPECT_THAT(snapshotter_->Prepare("extract-1", "", labels_).status(),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("cannot be reached on registry " + registry_->host_port())));
  EXPECT_THAT(snapshotter_->Stat("extract-1").status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(snapshotter_->Stat(chain_id_).status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(snapshotter_->remote_counts().fallback, 0u);
}

// The kubelet retries the pull: once the registry answers, the retry mounts the model.
TEST_F(ModelSnapshotterTest, ARetryAfterTheRegistryIsBackMountsTheModel) {
  registry_->Stop();
  ASSERT_FALSE(snapshotter_->Prepare("extract-1", "", labels_).ok());
  ASSERT_OK(registry_->Restart());
  EXPECT_THAT(snapshotter_->Prepare("extract-2", "", labels_).status(),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(snapshotter_->ActiveModels(), ElementsAre(ModelName()));
}

// What an earlier fallback left (the volume layer unpacked under its chain ID) is replaced by
// the model at the next remote Prepare, not answered from.
TEST_F(ModelSnapshotterTest, AnUnpackedVolumeLayerIsReplacedByTheModelAtTheNextPrepare) {
  Labels labels = labels_;
  labels.erase(kLabelCriImageRef);
  ASSERT_OK(snapshotter_->Prepare("extract-1", "", labels).status());
  ASSERT_OK(snapshotter_->Commit(chain_id_, "extract-1", labels));
  EXPECT_THAT(snapshotter_->Prepare("extract-2", "", labels_).status(),
              StatusIs(absl::StatusCode::kAlreadyExists));
  ASSERT_OK_AND_ASSIGN(SnapshotInfo info, snapshotter_->Stat(chain_id_));
  EXPECT_EQ(info.labels[std::string(kLabelRemoteModel)], ModelName());
  EXPECT_THAT(snapshotter_->ActiveModels(), ElementsAre(ModelName()));
}

TEST_F(ModelSnapshotterTest, ARestartRegistersTheModelAgainWithoutTheRegistry) {
  ASSERT_THAT(snapshotter_->Prepare("extract-1", "", labels_).status(),
              StatusIs(absl::StatusCode::kAlreadyExists));
  {
    // Read everything once, so the cache holds it.
    ASSERT_OK_AND_ASSIGN(std::vector<Mount> mounts, snapshotter_->View("warm", chain_id_, {}));
    ASSERT_OK_AND_ASSIGN(std::string dir, MountAll(mounts));
    DescribeFiles(dir);
    umount2(dir.c_str(), MNT_DETACH);
    mounted_.pop_back();
    ASSERT_OK(snapshotter_->Remove("warm"));
  }
  ASSERT_OK(snapshotter_->Shutdown());
  snapshotter_.reset();
  registry_->Stop();

  ASSERT_OK(Open());
  ASSERT_TRUE(snapshotter_->WaitRestored(absl::Seconds(30)));
  EXPECT_THAT(snapshotter_->ActiveModels(), ElementsAre(ModelName()));
  ASSERT_OK_AND_ASSIGN(SnapshotInfo info, snapshotter_->Stat(chain_id_));
  EXPECT_EQ(info.kind, SnapshotKind::kCommitted);
  ASSERT_OK_AND_ASSIGN(std::vector<Mount> mounts, snapshotter_->View("vol-2", chain_id_, {}));
  ASSERT_OK_AND_ASSIGN(std::string dir, MountAll(mounts));
  std::map<std::string, std::string> got = DescribeFiles(dir);
  got.erase(".modelinfo.json");
  EXPECT_EQ(got, DescribeFiles(model_dir_.string()));
}

TEST_F(ModelSnapshotterTest, RemovingTheLastSnapshotOfAModelUnregistersIt) {
  ASSERT_THAT(snapshotter_->Prepare("extract-1", "", labels_).status(),
              StatusIs(absl::StatusCode::kAlreadyExists));
  ASSERT_OK(snapshotter_->Remove(chain_id_));
  EXPECT_THAT(snapshotter_->ActiveModels(), IsEmpty());
  EXPECT_FALSE(fs::exists(tmp_.Join("root/models/" + ModelName())));
  EXPECT_FALSE(fs::exists(snapshotter_->mount_dir() / ModelName()));
}

TEST_F(ModelSnapshotterTest, APlainHttpRegistryDeclaredInHostsTomlIsReached) {
  ASSERT_OK(snapshotter_->Shutdown());
  snapshotter_.reset();
  ASSERT_OK(Open(/*use_hosts_dir=*/true));
  EXPECT_THAT(snapshotter_->Prepare("extract-1", "", labels_).status(),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(snapshotter_->ActiveModels(), ElementsAre(ModelName()));
}

// `modelfs convert SRC --to DST`: V on a second registry, M and its weights left on the first.
// Prepare of V's layer reads V from the second registry and the weights from the first, and
// so does the model registered again after a restart (its record names the first registry),
// with the second registry stopped. The node allows the first registry (model_hosts).
TEST_F(ModelSnapshotterTest, AVolumeConvertedIntoAnotherRegistryReadsTheWeightsFromTheModels) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RegistryFixture> other, RegistryFixture::Start());
  const std::string dst = absl::StrCat(other->host_port(), "/team/llama:converted");
  ASSERT_OK_AND_ASSIGN(auto conv, modelfs::testing::RunModelfs({"convert", "--plain-http",
                                                                Ref("v1"), "--to", dst, "--json"}));
  ASSERT_EQ(conv.exit_code, 0) << conv.err;
  const std::string v_digest = modelfs::testing::ParseJsonOutput(conv.out)["volume"]["digest"];
  ASSERT_OK_AND_ASSIGN(auto client, modelfs::testing::ConnectPlainHttp(other->host_port()));
  ASSERT_OK_AND_ASSIGN(ManifestResult v, client->GetManifest("team/llama", v_digest));
  ASSERT_OK_AND_ASSIGN(Manifest vm, ParseManifest(v.bytes));
  ASSERT_EQ(vm.layers.size(), 1u);
  const std::string chain = vm.layers[0].digest.str();
  Labels labels(vm.layers[0].annotations.begin(), vm.layers[0].annotations.end());
  labels[kLabelTargetRef] = chain;
  labels[kLabelCriImageRef] = dst;
  labels[kLabelCriManifestDigest] = v_digest;

  auto reopen = [&] {
    if (snapshotter_) {
      ASSERT_OK(snapshotter_->Shutdown());
    }
    snapshotter_.reset();
    ModelSnapshotterOptions o;
    o.root = tmp_.Join("root");
    o.registry.hosts.plain_http_hosts = {registry_->host_port(), other->host_port()};
    o.model_hosts = {registry_->host_port()};
    o.prefetch = PrefetchPolicy::kNone;
    o.log = [this](const log::Event& e) {
      log_ += log::FormatLine(e, absl::Now(), log::Format::kLogfmt) + "\n";
    };
    ASSERT_OK_AND_ASSIGN(snapshotter_, ModelSnapshotter::Open(o));
  };
  reopen();
  ASSERT_THAT(snapshotter_->Prepare("extract-1", "", labels).status(),
              StatusIs(absl::StatusCode::kAlreadyExists))
      << log_;
  EXPECT_THAT(snapshotter_->ActiveModels(), ElementsAre(ModelName()));

  reopen();
  other->Stop();  // V's registry: the weights never came from there
  ASSERT_TRUE(snapshotter_->WaitRestored(absl::Seconds(30)));
  ASSERT_OK_AND_ASSIGN(std::vector<Mount> mounts, snapshotter_->View("vol", chain, {}));
  ASSERT_OK_AND_ASSIGN(std::string dir, MountAll(mounts));
  std::map<std::string, std::string> got = DescribeFiles(dir);
  got.erase(".modelinfo.json");
  EXPECT_EQ(got, DescribeFiles(model_dir_.string())) << log_;
}

TEST_F(ModelSnapshotterTest, WithoutAnyHostConfigurationTlsIsRequiredAndThePrepareFails) {
  ASSERT_OK(snapshotter_->Shutdown());
  snapshotter_.reset();
  ModelSnapshotterOptions o;
  o.root = tmp_.Join("root");
  o.log = [this](const log::Event& e) {
    log_ += log::FormatLine(e, absl::Now(), log::Format::kLogfmt) + "\n";
  };
  ASSERT_OK_AND_ASSIGN(snapshotter_, ModelSnapshotter::Open(o));
  EXPECT_THAT(snapshotter_->Prepare("extract-1", "", labels_).status(),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(snapshotter_->remote_counts().fallback, 0u);
  EXPECT_THAT(snapshotter_->ActiveModels(), IsEmpty());
}

// containerd's pull must fetch nothing past what registering the model reads: the background
// prefetch waits until a container first uses the model.
TEST_F(ModelSnapshotterTest, PrefetchAllStartsAtTheFirstViewOfTheModelNotAtThePull) {
  ASSERT_OK(snapshotter_->Shutdown());
  snapshotter_.reset();
  prefetch_ = PrefetchPolicy::kAll;
  ASSERT_OK(Open());
  ASSERT_OK_AND_ASSIGN(auto client, modelfs::testing::ConnectPlainHttp(registry_->host_port()));
  ASSERT_OK_AND_ASSIGN(ManifestResult m, client->GetManifest(kRepo, model_digest_));
  ASSERT_OK_AND_ASSIGN(Manifest mm, ParseManifest(m.bytes));
  Descriptor largest;
  for (const Descriptor& d : mm.layers) {
    if (d.size > largest.size) largest = d;
  }
  ASSERT_THAT(snapshotter_->Prepare("extract-1", "", labels_).status(),
              StatusIs(absl::StatusCode::kAlreadyExists));
  absl::SleepFor(absl::Seconds(1));  // time for a prefetch that should not run
  ASSERT_OK_AND_ASSIGN(BlobCache::LayerInfo pulled, snapshotter_->cache_layer_info(largest.digest));
  EXPECT_LT(pulled.cached_chunks, pulled.chunk_count);

  ASSERT_OK(snapshotter_->View("vol-1", chain_id_, {}).status());
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  BlobCache::LayerInfo viewed;
  do {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_OK_AND_ASSIGN(viewed, snapshotter_->cache_layer_info(largest.digest));
  } while (viewed.cached_chunks < viewed.chunk_count && absl::Now() < deadline);
  EXPECT_EQ(viewed.cached_chunks, viewed.chunk_count);
}

TEST_F(ModelSnapshotterTest, ASecondDaemonOnTheSameRootIsRefused) {
  ModelSnapshotterOptions o;
  o.root = tmp_.Join("root");
  EXPECT_THAT(ModelSnapshotter::Open(o).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("in use")));
}

// A registry behind htpasswd: the daemon reads its credentials from docker_config, and never
// writes the password to its log.
class ModelSnapshotterAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_OR_FAIL_IF_UNAVAILABLE(
        geteuid() != 0 || !fs::exists("/dev/fuse") ? "needs root and /dev/fuse" : "");
    modelfs::testing::RegistryFixtureOptions ro;
    ro.auth = modelfs::testing::RegistryFixtureOptions::Auth::kHtpasswd;
    ASSERT_OK_AND_ASSIGN(registry_, RegistryFixture::Start(ro));
    docker_config_ = tmp_.Join("config.json").string();
    std::ofstream(docker_config_) << modelfs::testing::DockerConfigJson(registry_->host_port(),
                                                                        ro.username, ro.password);
    password_ = ro.password;
    model_dir_ = tmp_.Join("model");
    ASSERT_OK(modelfs::testing::WriteTestModel(model_dir_.string(), /*seed=*/61).status());
    const std::string ref = absl::StrCat(registry_->host_port(), "/private/llama:v1");
    ASSERT_OK_AND_ASSIGN(auto push, modelfs::testing::RunModelfs(
                                        {"push", "--plain-http", "--docker-config", docker_config_,
                                         ref, model_dir_.string(), "--json"}));
    ASSERT_EQ(push.exit_code, 0) << push.err;
    nlohmann::json j = modelfs::testing::ParseJsonOutput(push.out);
    const std::string volume_digest = j["volume"]["digest"];

    ASSERT_OK_AND_ASSIGN(ImageReference parsed, ImageReference::Parse(ref));
    RegistryAccessOptions access;
    access.hosts.plain_http = true;
    access.docker_config = docker_config_;
    ASSERT_OK_AND_ASSIGN(auto client, ConnectRegistry(parsed, HostCapability::kPull, access));
    ASSERT_OK_AND_ASSIGN(ManifestResult v, client->GetManifest("private/llama", volume_digest));
    ASSERT_OK_AND_ASSIGN(Manifest vm, ParseManifest(v.bytes));
    chain_id_ = vm.layers[0].digest.str();
    labels_ = Labels(vm.layers[0].annotations.begin(), vm.layers[0].annotations.end());
    labels_[kLabelTargetRef] = chain_id_;
    labels_[kLabelCriImageRef] = ref + "-volume";
    labels_[kLabelCriManifestDigest] = volume_digest;
  }

  void TearDown() override {
    if (snapshotter_) (void)snapshotter_->Shutdown();
  }

  void Open(const std::string& docker_config) {
    ModelSnapshotterOptions o;
    o.root = tmp_.Join("root");
    o.registry.hosts.plain_http_hosts = {registry_->host_port()};
    o.registry.docker_config = docker_config;
    o.prefetch = PrefetchPolicy::kNone;
    o.log = [this](const log::Event& e) {
      log_ += log::FormatLine(e, absl::Now(), log::Format::kLogfmt) + "\n";
    };
    ASSERT_OK_AND_ASSIGN(snapshotter_, ModelSnapshotter::Open(o));
  }

  TempDir tmp_;
  std::unique_ptr<RegistryFixture> registry_;
  std::string docker_config_;
  std::string password_;
  fs::path model_dir_;
  std::string chain_id_;
  Labels labels_;
  std::string log_;
  std::unique_ptr<ModelSnapshotter> snapshotter_;
};

TEST_F(ModelSnapshotterAuthTest, CredentialsFromDockerConfigMountThePrivateModel) {
  Open(docker_config_);
  ASSERT_THAT(snapshotter_->Prepare("extract-1", "", labels_).status(),
              StatusIs(absl::StatusCode::kAlreadyExists));
  ASSERT_OK_AND_ASSIGN(std::vector<Mount> mounts, snapshotter_->View("vol", chain_id_, {}));
  ASSERT_EQ(mounts.size(), 1u);
  std::map<std::string, std::string> got = DescribeFiles(mounts[0].source);
  got.erase(".modelinfo.json");
  EXPECT_EQ(got, DescribeFiles(model_dir_.string()));
  EXPECT_EQ(log_.find(password_), std::string::npos);
}

TEST_F(ModelSnapshotterAuthTest, WithoutCredentialsThePrepareIsUnavailableAndNeverLogsASecret) {
  Open("");
  EXPECT_THAT(snapshotter_->Prepare("extract-1", "", labels_).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("UNAUTHENTICATED")));
  EXPECT_EQ(snapshotter_->remote_counts().error, 1u);
  EXPECT_THAT(log_, HasSubstr("level=error component=snapshotter msg=\"model not mounted\""));
  EXPECT_THAT(log_, HasSubstr("reason=\"UNAVAILABLE:"));
  EXPECT_EQ(log_.find(password_), std::string::npos);
}

}  // namespace
}  // namespace modelfs::snapshotter
