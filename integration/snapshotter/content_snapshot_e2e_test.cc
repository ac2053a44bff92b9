// ModelSnapshotter on an image volume that names a plain ModelPack artifact M, with a fake of
// containerd's content store and the kernel's FUSE: the Prepare containerd 2.1 sends, the
// model served from the content store (raw and tar layers, verified), a key that is not a
// model, a layer whose bytes do not match, Remove, and a restart that registers the model
// again.
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/oci/manifest.h"
#include "core/oci/modelpack.h"
#include "core/oci/tar.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "snapshotter/model/model_snapshotter.h"
#include "testsupport/fakes/fake_content_store.h"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::snapshotter {
namespace {

namespace fs = std::filesystem;
using ::modelfs::testing::DescribeFiles;
using ::modelfs::testing::FakeContentStore;
using ::modelfs::testing::ReadFileOrDie;
using ::modelfs::testing::TempDir;

constexpr char kNamespace[] = "k8s.io";
const std::string kSandbox(64, 'b');

std::string VolumeKey(const Digest& image) {
  return absl::StrCat(kNamespace, "/7//run/containerd/io.containerd.grpc.v1.cri/image-volumes/",
                      kSandbox, "/", std::string(image.hex()));
}

class ContentSnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_OR_FAIL_IF_UNAVAILABLE(
        geteuid() != 0 || !fs::exists("/dev/fuse") ? "needs root and /dev/fuse" : "");
    source_ = tmp_.Join("model").string();
    ASSERT_OK_AND_ASSIGN(files_, modelfs::testing::WriteTestModel(source_, /*seed=*/47));
    ASSERT_OK(Open());
  }

  void TearDown() override {
    for (const std::string& m : mounted_) umount2(m.c_str(), MNT_DETACH);
    mounted_.clear();
    if (snapshotter_) (void)snapshotter_->Shutdown();
    snapshotter_.reset();
  }

  // containerd_address: when set, the daemon's own client of that socket instead of store_.
  absl::Status Open(const std::string& containerd_address = "") {
    ModelSnapshotterOptions o;
    o.root = tmp_.Join("root");
    if (containerd_address.empty()) {
      o.content_store = &store_;
    } else {
      o.containerd_address = containerd_address;
    }
    o.prefetch = PrefetchPolicy::kNone;
    o.log = [this](const log::Event& e) {
      log_ += log::FormatLine(e, absl::Now(), log::Format::kLogfmt) + "\n";
    };
    absl::StatusOr<std::unique_ptr<ModelSnapshotter>> s = ModelSnapshotter::Open(o);
    if (!s.ok()) return s.status();
    snapshotter_ = *std::move(s);
    return absl::OkStatus();
  }

  // M as containerd's content store holds it after a pull: every file of the test model as a
  // layer (the GGUF in a tar layer when `tar_gguf`, the rest raw), its config, its manifest.
  Digest StoreModel(bool tar_gguf) {
    std::vector<ModelLayerInput> layers;
    for (const std::string& f : files_) {
      const std::string bytes = ReadFileOrDie(source_ + "/" + f);
      ModelLayerInput in;
      in.path = f;
      in.kind = ClassifyFile(f);
      if (tar_gguf && f == "tiny.gguf") {
        TarWriter tar;
        EXPECT_OK(tar.AddFile(f, bytes));
        const std::string t = tar.Finish();
        in.encoding = LayerEncoding::kTar;
        in.digest = store_.Add(kNamespace, t);
        in.size = t.size();
      } else {
        in.digest = store_.Add(kNamespace, bytes);
        in.size = bytes.size();
      }
      layers.push_back(in);
    }
    ModelPackConfig config;
    config.descriptor.name = "content-store test";
    const std::string config_json = SerializeModelPackConfig(config);
    store_.Add(kNamespace, config_json);
    absl::StatusOr<Manifest> m = BuildModelManifest(config_json, layers);
    EXPECT_OK(m.status());
    return m.ok() ? store_.Add(kNamespace, SerializeManifest(*m)) : Digest();
  }

  // Bind-mounts the one read-only bind mount the snapshotter returned at a fresh directory.
  absl::StatusOr<std::string> MountBind(const std::vector<Mount>& mounts) {
    if (mounts.size() != 1 || mounts[0].type != "bind") {
      return absl::InternalError("want one bind mount");
    }
    std::string target = tmp_.Join(absl::StrCat("mnt", mounted_.size())).string();
    fs::create_directories(target);
    if (::mount(mounts[0].source.c_str(), target.c_str(), "", MS_BIND | MS_REC, nullptr) != 0) {
      return absl::InternalError(absl::StrCat("mount: ", strerror(errno)));
    }
    mounted_.push_back(target);
    return target;
  }

  std::string ModelDir(const Digest& m) const {
    return (snapshotter_->mount_dir() / ("sha256-" + std::string(m.hex()))).string();
  }

  TempDir tmp_;
  FakeContentStore store_;
  std::string source_;
  std::vector<std::string> files_;
  std::unique_ptr<ModelSnapshotter> snapshotter_;
  std::vector<std::string> mounted_;
  std::string log_;
};

TEST_F(ContentSnapshotTest, TheVolumeShowsEveryFileOfTheModelFromTheContentStore) {
  const Digest m = StoreModel(/*tar_gguf=*/true);
  const std::string key = VolumeKey(m);
  ASSERT_OK_AND_ASSIGN(std::vector<Mount> mounts, snapshotter_->Prepare(key, "", {}));
  EXPECT_EQ(mounts, (std::vector<Mount>{{"bind", ModelDir(m), "", {"ro", "rbind"}}}));
  ASSERT_OK_AND_ASSIGN(std::vector<Mount> again, snapshotter_->Mounts(key));
  EXPECT_EQ(again, mounts);
  ASSERT_OK_AND_ASSIGN(std::string dir, MountBind(mounts));
  std::map<std::string, std::string> got = DescribeFiles(dir);
  ASSERT_EQ(got.erase(".modelinfo.json"), 1u);
  EXPECT_EQ(got, DescribeFiles(source_));
  nlohmann::json info = nlohmann::json::parse(ReadFileOrDie(dir + "/.modelinfo.json"));
  EXPECT_EQ(info["digests"]["manifest"], m.str());
  EXPECT_EQ(info["verification"], "whole-layer");
}

TEST_F(ContentSnapshotTest, RemoveTakesTheModelOutOfTheTree) {
  const Digest m = StoreModel(/*tar_gguf=*/false);
  const std::string key = VolumeKey(m);
  ASSERT_OK(snapshotter_->Prepare(key, "", {}).status());
  EXPECT_TRUE(fs::exists(ModelDir(m) + "/config.json"));
  ASSERT_OK(snapshotter_->Remove(key));
  EXPECT_FALSE(fs::exists(ModelDir(m)));
  EXPECT_THAT(snapshotter_->ActiveModels(), ::testing::IsEmpty());
}

TEST_F(ContentSnapshotTest, ABlobThatIsNotAModelGivesTheOrdinaryEmptySnapshot) {
  const Digest config = store_.Add(kNamespace, R"({"architecture":"amd64","os":"linux"})");
  const std::string key = VolumeKey(config);
  ASSERT_OK_AND_ASSIGN(std::vector<Mount> mounts, snapshotter_->Prepare(key, "", {}));
  ASSERT_EQ(mounts.size(), 1u);
  EXPECT_NE(mounts[0].source, ModelDir(config));
  EXPECT_THAT(snapshotter_->ActiveModels(), ::testing::IsEmpty());
  EXPECT_THAT(log_, ::testing::HasSubstr("not served from containerd's content store"));
}

TEST_F(ContentSnapshotTest, ALayerWhoseBytesDoNotMatchItsDigestIsNeverServed) {
  const Digest m = StoreModel(/*tar_gguf=*/false);
  const std::string shard = tmp_.Join("model").string() + "/tiny.gguf";
  store_.Corrupt(kNamespace, Digest::Of(ReadFileOrDie(shard)), 1000);
  ASSERT_OK_AND_ASSIGN(std::vector<Mount> mounts, snapshotter_->Prepare(VolumeKey(m), "", {}));
  ASSERT_OK_AND_ASSIGN(std::string dir, MountBind(mounts));
  std::ifstream in(dir + "/tiny.gguf", std::ios::binary);
  char buf[16];
  in.read(buf, sizeof(buf));
  EXPECT_TRUE(in.fail());  // EIO
  EXPECT_EQ(ReadFileOrDie(dir + "/config.json"), ReadFileOrDie(source_ + "/config.json"));
}

TEST_F(ContentSnapshotTest, AfterARestartTheModelIsRegisteredAgain) {
  const Digest m = StoreModel(/*tar_gguf=*/true);
  const std::string key = VolumeKey(m);
  ASSERT_OK(snapshotter_->Prepare(key, "", {}).status());
  TearDown();
  ASSERT_OK(Open());
  ASSERT_TRUE(snapshotter_->WaitRestored(absl::Seconds(30)));
  ASSERT_OK_AND_ASSIGN(std::vector<Mount> mounts, snapshotter_->Mounts(key));
  ASSERT_OK_AND_ASSIGN(std::string dir, MountBind(mounts));
  std::map<std::string, std::string> got = DescribeFiles(dir);
  got.erase(".modelinfo.json");
  EXPECT_EQ(got, DescribeFiles(source_));
  ASSERT_OK(snapshotter_->Remove(key));
  EXPECT_FALSE(fs::exists(ModelDir(m)));
}

TEST_F(ContentSnapshotTest, AnAddressThatReachesNoContainerdFailsThePrepareNamingIt) {
  TearDown();
  const std::string address = tmp_.Join("no-containerd.sock").string();
  ASSERT_OK(Open(address));
  const std::string key = VolumeKey(Digest::Of("an artifact containerd pulled"));
  absl::StatusOr<std::vector<Mount>> mounts = snapshotter_->Prepare(key, "", {});
  EXPECT_THAT(mounts.status(),
              modelfs::testing::StatusIs(
                  absl::StatusCode::kUnavailable,
                  ::testing::HasSubstr(absl::StrCat("image volume ", key, ": containerd_address \"",
                                                    address, "\" does not reach containerd"))));
  EXPECT_THAT(snapshotter_->ActiveModels(), ::testing::IsEmpty());
}

TEST_F(ContentSnapshotTest, ASocketNobodyListensOnFailsThePrepareNamingIt) {
  TearDown();
  // A unix socket that is bound but not listening: connections are refused.
  const std::string address = tmp_.Join("stale.sock").string();
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  ASSERT_LT(address.size(), sizeof(sa.sun_path));
  memcpy(sa.sun_path, address.c_str(), address.size() + 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0) << strerror(errno);
  ASSERT_OK(Open(address));
  absl::StatusOr<std::vector<Mount>> mounts =
      snapshotter_->Prepare(VolumeKey(Digest::Of("another artifact")), "", {});
  close(fd);
  EXPECT_THAT(mounts.status(),
              modelfs::testing::StatusIs(absl::StatusCode::kUnavailable,
                                         ::testing::HasSubstr("no connection within 1s")));
}

TEST_F(ContentSnapshotTest, AnOrdinaryImagesVolumeIsPreparedAsBeforeWhateverTheAddress) {
  TearDown();
  ASSERT_OK(Open(tmp_.Join("no-containerd.sock").string()));
  // An image with layers: its volume's snapshot has the image's top layer as parent, and never
  // asks containerd's content store.
  ASSERT_OK(snapshotter_->Prepare("layer-active", "", {}).status());
  ASSERT_OK(snapshotter_->Commit("layer", "layer-active", {}));
  ASSERT_OK_AND_ASSIGN(std::vector<Mount> mounts,
                       snapshotter_->Prepare(VolumeKey(Digest::Of("an image")), "layer", {}));
  EXPECT_EQ(mounts.size(), 1u);
}

}  // namespace
}  // namespace modelfs::snapshotter
