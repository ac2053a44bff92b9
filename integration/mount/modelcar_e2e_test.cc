// KServe modelcars and other ordinary images (issue 30), built by a real tool: Debian's buildah
// (`from scratch`, `copy`, `run --isolation chroot`, `commit`, `push`) makes a three-layer
// image: a busybox base (the static binary and symlinks to it), a layer with /models holding the
// project's test model, and a layer that removes a base file (a real `.wh.` whiteout). It is
// pushed to a real registry as gzip, zstd, zstd:chunked and uncompressed, then `modelfs inspect`,
// `mount`, `pull` and `convert` (and a mount of the volume image) must show exactly the merged
// tree.
//
// Hostile images are written by hand (TarWriter, with headers edited where it refuses): each
// is refused naming the layer and the entry, or has the entry skipped, and no wrong byte is
// ever served.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "core/oci/digest.h"
#include "core/oci/layer_decoder.h"
#include "core/oci/manifest.h"
#include "core/oci/media_types.h"
#include "core/oci/tar.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration/mount/mount_test_env.h"
#include "nlohmann/json.hpp"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/tar_blocks.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string Readlink(const std::string& path) {
  char buf[4096];
  ssize_t n = readlink(path.c_str(), buf, sizeof buf);
  return n < 0 ? std::string("error: ") + strerror(errno) : std::string(buf, n);
}

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

// The files of `dir` under "models/", by path relative to `dir`.
std::map<std::string, std::string> ModelFiles(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& [path, what] : DescribeFiles(dir)) {
    if (path.rfind("models/", 0) == 0) out[path] = what;
  }
  return out;
}

class ImageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string missing;
    if (geteuid() != 0 || !fs::exists("/dev/fuse")) missing = "needs root and /dev/fuse";
    for (const char* tool : {"/usr/bin/buildah", "/bin/busybox"}) {
      if (missing.empty() && !fs::exists(tool)) {
        missing = absl::StrCat("needs ", tool, " (scripts/install-deps.sh)");
      }
    }
    SKIP_OR_FAIL_IF_UNAVAILABLE(missing);
    BecomeSubreaper();
    ASSERT_OK_AND_ASSIGN(registry_, RegistryFixture::Start());
    ASSERT_OK_AND_ASSIGN(client_, ConnectPlainHttp(registry_->host_port()));
  }

  // `buildah` with this test's own storage (vfs: no overlay mounts), never the machine's.
  ProcessResult Buildah(std::vector<std::string> args) {
    std::vector<std::string> argv = {"buildah",
                                     "--root",
                                     tmp_.Join("buildah/root").string(),
                                     "--runroot",
                                     tmp_.Join("buildah/run").string(),
                                     "--storage-driver",
                                     "vfs"};
    argv.insert(argv.end(), args.begin(), args.end());
    absl::StatusOr<ProcessResult> r = RunCommand(argv, absl::Seconds(240));
    EXPECT_OK(r.status());
    if (!r.ok()) return ProcessResult{.exit_code = -1};
    EXPECT_EQ(r->exit_code, 0) << absl::StrJoin(args, " ") << ": " << r->err;
    return *r;
  }

  static std::string Trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  }

  // Builds the modelcar (three layers) and pushes it as `compression` to modelcars:`tag`.
  void BuildAndPushModelcar(const std::string& compression, const std::string& tag) {
    const std::string base = tmp_.Join("base").string();
    fs::create_directories(base + "/bin");
    fs::create_directories(base + "/etc");
    fs::copy_file("/bin/busybox", base + "/bin/busybox");
    fs::create_symlink("busybox", base + "/bin/sh");
    fs::create_symlink("busybox", base + "/bin/rm");
    fs::create_symlink("/bin/busybox", base + "/bin/ls");  // absolute, as busybox images have
    {
      std::ofstream(base + "/etc/motd") << "welcome\n";
      std::ofstream(base + "/etc/keep") << "kept\n";
    }
    const std::string model = tmp_.Join("model").string();
    ASSERT_OK(WriteTestModel(model, /*seed=*/30).status());
    want_ = DescribeFiles(model);

    const std::string c1 = Trim(Buildah({"from", "scratch"}).out);
    Buildah({"copy", c1, base, "/"});
    Buildah({"commit", "-q", c1, "modelcar-base"});
    const std::string c2 = Trim(Buildah({"from", "modelcar-base"}).out);
    Buildah({"copy", c2, model, "/models/"});
    Buildah({"commit", "-q", c2, "modelcar-models"});
    const std::string c3 = Trim(Buildah({"from", "modelcar-models"}).out);
    Buildah({"run", "--isolation", "chroot", c3, "--", "/bin/rm", "/etc/motd"});
    Buildah({"commit", "-q", c3, "modelcar"});
    // buildah 1.28 pushes gzip even with --disable-compression: an uncompressed modelcar is
    // buildah's gzip one with each layer decompressed (same config, same diff_ids).
    const bool plain = compression == "none";
    Buildah({"push", "-q", "--tls-verify=false", "--compression-format",
             plain ? "gzip" : compression, "modelcar",
             absl::StrCat("docker://", Ref(plain ? tag + "-gzip" : tag))});
    if (plain) {
      ASSERT_NO_FATAL_FAILURE(Decompress(tag + "-gzip", tag));
    }
  }

  // Pushes modelcars:`from` again as `to` with every layer an uncompressed tar.
  void Decompress(const std::string& from, const std::string& to) {
    ASSERT_OK_AND_ASSIGN(ManifestResult got, client_->GetManifest("modelcars", from));
    ASSERT_OK_AND_ASSIGN(Manifest m, ParseManifest(got.bytes));
    for (Descriptor& d : m.layers) {
      ASSERT_OK_AND_ASSIGN(std::string gz, FetchBlob(*client_, "modelcars", d.digest.str()));
      std::string tar;
      ASSERT_OK(DecodeLayer(
                    LayerEncoding::kTarGzip, d.digest, std::nullopt,
                    [&](uint64_t offset, std::string* piece) {
                      *piece = offset < gz.size() ? gz.substr(offset) : std::string();
                      return absl::OkStatus();
                    },
                    [&](std::string_view piece) {
                      tar.append(piece);
                      return absl::OkStatus();
                    })
                    .status());
      ASSERT_OK_AND_ASSIGN(d.digest, UploadBlob(*client_, "modelcars", tar));
      d.size = tar.size();
      d.media_type = std::string(kOciLayerTarMediaType);
    }
    ASSERT_OK(
        client_
            ->PutManifest("modelcars", to, SerializeManifest(m), std::string(kOciManifestMediaType))
            .status());
  }

  std::string Ref(const std::string& tag) const {
    return absl::StrCat(registry_->host_port(), "/modelcars:", tag);
  }

  // The merged tree: every model file byte for byte, the base's links as links, the
  // whited-out file gone.
  void ExpectModelcarTree(const std::string& dir) {
    std::map<std::string, std::string> want;
    for (const auto& [path, digest] : want_) want["models/" + path] = digest;
    EXPECT_EQ(ModelFiles(dir), want);
    EXPECT_EQ(Readlink(dir + "/bin/sh"), "busybox");
    EXPECT_EQ(Readlink(dir + "/bin/ls"), "/bin/busybox");
    EXPECT_EQ(ReadFileOrDie(dir + "/bin/busybox"), ReadFileOrDie("/bin/busybox"));
    // The image's modes: busybox runs (a modelcar's container runs its `sh`), the weights
    // do not.
    struct stat st;
    ASSERT_EQ(stat((dir + "/bin/busybox").c_str(), &st), 0);
    EXPECT_NE(st.st_mode & 0111, 0u) << std::oct << st.st_mode;
    ASSERT_EQ(stat((dir + "/models/model-00001-of-00002.safetensors").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0111, 0u) << std::oct << st.st_mode;
    EXPECT_EQ(ReadFileOrDie(dir + "/etc/keep"), "kept\n");
    EXPECT_FALSE(Exists(dir + "/etc/motd"));
    EXPECT_FALSE(Exists(dir + "/etc/.wh.motd"));
  }

  std::unique_ptr<ModelMount> Mount(const std::string& ref, const std::string& name) {
    MountOptions o;
    o.cache_dir = tmp_.Join("cache").string();
    const std::string dir = tmp_.Join("mnt-" + name).string();
    fs::create_directories(dir);
    absl::StatusOr<std::unique_ptr<ModelMount>> m = ModelMount::Start(ref, dir, o);
    EXPECT_OK(m.status());
    return m.ok() ? std::move(*m) : nullptr;
  }

  TempDir tmp_;
  std::unique_ptr<RegistryFixture> registry_;
  std::unique_ptr<RegistryClient> client_;
  std::map<std::string, std::string> want_;  // the model's files, by path under /models
};

class ModelcarTest : public ImageTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(ModelcarTest, InspectMountPullAndConvertShowTheMergedTree) {
  ASSERT_NO_FATAL_FAILURE(BuildAndPushModelcar(GetParam(), "v1"));
  ASSERT_FALSE(want_.empty());

  // buildah wrote what was asked for (not blobs it had pushed before in another form).
  ASSERT_OK_AND_ASSIGN(ManifestResult pushed, client_->GetManifest("modelcars", "v1"));
  ASSERT_OK_AND_ASSIGN(Manifest pushed_image, ParseManifest(pushed.bytes));
  ASSERT_EQ(pushed_image.layers.size(), 3u);
  const std::string want_type = GetParam() == "none" ? std::string(kOciLayerTarMediaType)
                                : GetParam().rfind("zstd", 0) == 0
                                    ? std::string(kOciLayerTarZstdMediaType)
                                    : std::string(kOciLayerTarGzipMediaType);
  bool chunked = false;
  for (const Descriptor& d : pushed_image.layers) {
    EXPECT_EQ(d.media_type, want_type);
    for (const auto& [k, v] : d.annotations) chunked |= k.find("zstd-chunked") != std::string::npos;
  }
  EXPECT_EQ(chunked, GetParam() == "zstd:chunked");

  ASSERT_OK_AND_ASSIGN(ProcessResult inspect, RunModelfs({"inspect", "--plain-http", Ref("v1")}));
  EXPECT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_THAT(inspect.out, HasSubstr("container image, 3 layers"));

  {
    std::unique_ptr<ModelMount> m = Mount(Ref("v1"), "image");
    ASSERT_NE(m, nullptr);
    ExpectModelcarTree(m->dir());
    const std::string info = ReadFileOrDie(m->dir() + "/.modelinfo.json");
    EXPECT_THAT(info, HasSubstr("models/model-00001-of-00002.safetensors"));
    EXPECT_THAT(info, ::testing::Not(HasSubstr("bin/busybox")));
    EXPECT_OK(m->Unmount());
  }

  const std::string dest = tmp_.Join("pulled").string();
  ASSERT_OK_AND_ASSIGN(ProcessResult pull, RunModelfs({"pull", "--plain-http", Ref("v1"), dest}));
  ASSERT_EQ(pull.exit_code, 0) << pull.err;
  ExpectModelcarTree(dest);

  ASSERT_OK_AND_ASSIGN(ProcessResult convert,
                       RunModelfs({"convert", "--plain-http", "--json", Ref("v1")}));
  ASSERT_EQ(convert.exit_code, 0) << convert.err;
  nlohmann::json j = ParseJsonOutput(convert.out);
  const std::string volume = j["volume"]["digest"].get<std::string>();
  // Tar layers get a chunk index, compressed ones a seek index too. Every layer here is served
  // lazily: a layer with more than one entry point (gzip checkpoints every 4 MiB,
  // zstd:chunked's frames) from the point before a read, and a small one (all of this
  // modelcar's: buildah's zstd is one frame per layer, the small gzip layers have one
  // checkpoint) from its start. Only a large layer of one point is verified whole
  // (seek_index_e2e_test).
  EXPECT_EQ(j["verified_whole"], nlohmann::json::array()) << j.dump();
  const std::string image = j["model"]["digest"].get<std::string>();

  // The referrers fallback tag of the image lists V (docker-registry has no referrers API).
  ASSERT_OK_AND_ASSIGN(
      ManifestResult fallback,
      client_->GetManifest("modelcars", absl::StrReplaceAll(image, {{"sha256:", "sha256-"}})));
  nlohmann::json index = nlohmann::json::parse(fallback.bytes);
  EXPECT_EQ(index["mediaType"], std::string(kOciIndexMediaType));
  ASSERT_EQ(index["manifests"].size(), 1u);
  EXPECT_EQ(index["manifests"][0]["digest"], volume);
  EXPECT_EQ(index["manifests"][0]["artifactType"], std::string(kVolumeImageArtifactType));

  std::unique_ptr<ModelMount> v =
      Mount(absl::StrCat(registry_->host_port(), "/modelcars@", volume), "volume");
  ASSERT_NE(v, nullptr);
  ExpectModelcarTree(v->dir());
  EXPECT_THAT(ReadFileOrDie(v->dir() + "/.modelinfo.json"),
              HasSubstr("\"verification\": \"chunk-index\""));
  EXPECT_OK(v->Unmount());
}

INSTANTIATE_TEST_SUITE_P(Compressions, ModelcarTest,
                         ::testing::Values("gzip", "zstd", "zstd:chunked", "none"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           return absl::StrReplaceAll(i.param, {{":", "_"}});
                         });

// A multi-platform modelcar: buildah's manifest list (`buildah manifest create`, `add`,
// `push --all`). mount, pull and convert take the manifest for this node's platform from it,
// as containerd does, and V's subject is that manifest (what containerd's CRI labels pin).
TEST_F(ImageTest, AManifestListResolvesToTheManifestForThisNode) {
  ASSERT_NO_FATAL_FAILURE(BuildAndPushModelcar("gzip", "v1"));
  Buildah({"manifest", "create", "modelcar-list"});
  Buildah({"manifest", "add", "modelcar-list", "modelcar"});
  Buildah({"manifest", "push", "-q", "--all", "--tls-verify=false", "modelcar-list",
           absl::StrCat("docker://", Ref("multi"))});
  ASSERT_FALSE(HasFailure());
  ASSERT_OK_AND_ASSIGN(ManifestResult list, client_->GetManifest("modelcars", "multi"));
  ASSERT_TRUE(IsIndexMediaType(list.media_type)) << list.media_type;
  ASSERT_OK_AND_ASSIGN(Index index, ParseIndex(list.bytes));
  ASSERT_EQ(index.manifests.size(), 1u);
  const std::string platform_manifest = index.manifests[0].digest.str();
  {
    std::unique_ptr<ModelMount> m = Mount(Ref("multi"), "multi");
    ASSERT_NE(m, nullptr);
    ExpectModelcarTree(m->dir());
    EXPECT_OK(m->Unmount());
  }
  ASSERT_OK_AND_ASSIGN(ProcessResult convert,
                       RunModelfs({"convert", "--plain-http", "--json", Ref("multi")}));
  ASSERT_EQ(convert.exit_code, 0) << convert.err;
  nlohmann::json j = ParseJsonOutput(convert.out);
  EXPECT_EQ(j["model"]["digest"], platform_manifest) << j.dump();
  std::unique_ptr<ModelMount> v = Mount(
      absl::StrCat(registry_->host_port(), "/modelcars@", j["volume"]["digest"].get<std::string>()),
      "multi-volume");
  ASSERT_NE(v, nullptr);
  ExpectModelcarTree(v->dir());
  EXPECT_OK(v->Unmount());
}

// --- hostile images -------------------------------------------------------------------------

// Rewrites field [off, off+len) of the header block at `at` and fixes its checksum.
void PatchHeader(std::string& tar, size_t at, size_t off, const std::string& value) {
  std::memset(&tar[at + off], 0, off == 156 ? 1 : 100);
  std::memcpy(&tar[at + off], value.data(), value.size());
  FixTarChecksum(tar, at);
}
constexpr size_t kName = 0, kType = 156, kLink = 157;

class HostileImageTest : public ImageTest {
 protected:
  // Pushes an image of uncompressed `layers` as hostile:`tag`.
  void PushImage(const std::string& tag, const std::vector<std::string>& layers) {
    Manifest m;
    m.media_type = std::string(kOciManifestMediaType);
    nlohmann::json diff_ids = nlohmann::json::array();
    for (const std::string& l : layers) {
      ASSERT_OK_AND_ASSIGN(Digest d, UploadBlob(*client_, "hostile", l));
      Descriptor desc;
      desc.media_type = std::string(kOciLayerTarMediaType);
      desc.digest = d;
      desc.size = l.size();
      m.layers.push_back(desc);
      diff_ids.push_back(d.str());
    }
    const std::string config =
        nlohmann::json{{"architecture", "amd64"},
                       {"os", "linux"},
                       {"rootfs", {{"type", "layers"}, {"diff_ids", diff_ids}}}}
            .dump();
    ASSERT_OK_AND_ASSIGN(Digest c, UploadBlob(*client_, "hostile", config));
    m.config.media_type = std::string(kOciConfigMediaType);
    m.config.digest = c;
    m.config.size = config.size();
    ASSERT_OK(
        client_
            ->PutManifest("hostile", tag, SerializeManifest(m), std::string(kOciManifestMediaType))
            .status());
  }
  std::string HostileRef(const std::string& tag) const {
    return absl::StrCat(registry_->host_port(), "/hostile:", tag);
  }

  // mount and pull both refuse with exit 1 naming `layer` and `want`; nothing is mounted or
  // left at DEST.
  void ExpectRefused(const std::string& tag, const std::string& layer, const std::string& want) {
    const std::string dir = tmp_.Join("mnt-" + tag).string();
    fs::create_directories(dir);
    ASSERT_OK_AND_ASSIGN(ProcessResult r,
                         RunModelfs({"mount", "--plain-http", "--cache",
                                     tmp_.Join("cache").string(), HostileRef(tag), dir}));
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr(layer));
    EXPECT_THAT(r.err, HasSubstr(want));
    EXPECT_FALSE(FindMount(fs::canonical(dir).string()).has_value());
    const std::string dest = tmp_.Join("dest-" + tag).string();
    ASSERT_OK_AND_ASSIGN(ProcessResult p,
                         RunModelfs({"pull", "--plain-http", HostileRef(tag), dest}));
    EXPECT_EQ(p.exit_code, 1) << p.err;
    EXPECT_THAT(p.err, HasSubstr(want));
    EXPECT_FALSE(fs::exists(dest));
    EXPECT_FALSE(Exists("/etc/modelfs-hostile"));
  }
};

TEST_F(HostileImageTest, AFileWrittenThroughASymlinkOutOfTheTreeIsRefused) {
  TarWriter a, b;
  ASSERT_OK(a.AddSymlink("models", "/etc"));
  ASSERT_OK(b.AddFile("models/modelfs-hostile", "owned"));
  const std::string la = a.Finish(), lb = b.Finish();
  PushImage("through-link", {la, lb});
  ExpectRefused("through-link", Digest::Of(lb).str(),
                "entry 'models/modelfs-hostile' would be written through the symlink 'models'");
}

TEST_F(HostileImageTest, AHardLinkOutOfTheTreeIsRefused) {
  TarWriter a;
  ASSERT_OK(a.AddHardLink("models/passwd", "models/x"));
  std::string la = a.Finish();
  PatchHeader(la, 0, kLink, "../../etc/passwd");
  PushImage("hardlink-out", {la});
  ExpectRefused("hardlink-out", Digest::Of(la).str(), "hard link 'models/passwd' target");
}

TEST_F(HostileImageTest, AHardLinkToASymlinkIsRefused) {
  TarWriter a;
  ASSERT_OK(a.AddSymlink("shadow", "/etc/shadow"));
  ASSERT_OK(a.AddHardLink("models/shadow", "shadow"));
  const std::string la = a.Finish();
  PushImage("hardlink-symlink", {la});
  ExpectRefused("hardlink-symlink", Digest::Of(la).str(),
                "entry 'models/shadow': hard link to 'shadow', which is not a regular file");
}

TEST_F(HostileImageTest, ADotDotNameIsRefused) {
  TarWriter a;
  ASSERT_OK(a.AddFile("xx/etc/modelfs-hostile", "owned"));
  std::string la = a.Finish();
  PatchHeader(la, 0, kName, "../etc/modelfs-hostile");
  PushImage("dotdot", {la});
  ExpectRefused("dotdot", Digest::Of(la).str(), "refused path '../etc/modelfs-hostile'");
}

TEST_F(HostileImageTest, AWhiteoutOfANeverExistingPathAndADeviceNodeAreSkipped) {
  const std::string weights(3 << 20, 'w');
  TarWriter a, b;
  ASSERT_OK(a.AddFile("models/w.bin", weights));
  ASSERT_OK(a.AddFile("dev/kmsg", "placeholder"));
  ASSERT_OK(b.AddFile("models/.wh.ghost", ""));
  ASSERT_OK(b.AddFile(".wh.nowhere", ""));
  ASSERT_OK(b.AddFile("dev/kmsg", ""));
  std::string lb = b.Finish();
  // The third entry of b (two one-block headers of empty files before it) becomes a
  // character device over a's file.
  PatchHeader(lb, 2 * 512, kType, "3");
  PushImage("skipped", {a.Finish(), lb});
  std::unique_ptr<ModelMount> m = Mount(HostileRef("skipped"), "skipped");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(ReadFileOrDie(m->dir() + "/models/w.bin"), weights);
  EXPECT_FALSE(Exists(m->dir() + "/models/ghost"));
  EXPECT_FALSE(Exists(m->dir() + "/models/.wh.ghost"));
  EXPECT_FALSE(Exists(m->dir() + "/dev/kmsg"));
  ASSERT_OK_AND_ASSIGN(nlohmann::json stats, m->Stats());
  EXPECT_EQ(stats["image_tree"], (nlohmann::json{{"whiteouts", 0},
                                                 {"ignored_whiteouts", 2},
                                                 {"opaque_dirs", 0},
                                                 {"hardlinks", 0},
                                                 {"skipped_special", 1}}));
  EXPECT_OK(m->Unmount());
  const std::string dest = tmp_.Join("dest-skipped").string();
  ASSERT_OK_AND_ASSIGN(ProcessResult p,
                       RunModelfs({"pull", "--plain-http", HostileRef("skipped"), dest}));
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_EQ(ReadFileOrDie(dest + "/models/w.bin"), weights);
  EXPECT_FALSE(Exists(dest + "/dev/kmsg"));
  EXPECT_FALSE(Exists(dest + "/models/.wh.ghost"));
}

TEST_F(HostileImageTest, ASymlinkOutOfTheTreeIsServedAsALinkNeverFollowed) {
  TarWriter a;
  ASSERT_OK(a.AddSymlink("models/secret", "../../../../etc/shadow"));
  ASSERT_OK(a.AddFile("models/ok.txt", "ok"));
  PushImage("link-leaf", {a.Finish()});
  std::unique_ptr<ModelMount> m = Mount(HostileRef("link-leaf"), "link-leaf");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(Readlink(m->dir() + "/models/secret"), "../../../../etc/shadow");
  EXPECT_EQ(ReadFileOrDie(m->dir() + "/models/ok.txt"), "ok");
  EXPECT_OK(m->Unmount());
}

// A hard link within the tree (what `cp -l` or a dedup tool leaves in an image) is served as a
// second name of the same bytes, and `pull` writes it as a hard link, as unpacking would.
TEST_F(HostileImageTest, AHardLinkWithinTheTreeIsPulledAsAHardLink) {
  const std::string weights(2 << 20, 'h');
  TarWriter a;
  ASSERT_OK(a.AddFile("models/w.bin", weights));
  ASSERT_OK(a.AddHardLink("models/w-alias.bin", "models/w.bin"));
  PushImage("hardlink-in", {a.Finish()});
  std::unique_ptr<ModelMount> m = Mount(HostileRef("hardlink-in"), "hardlink-in");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(ReadFileOrDie(m->dir() + "/models/w-alias.bin"), weights);
  EXPECT_OK(m->Unmount());
  const std::string dest = tmp_.Join("dest-hardlink").string();
  ASSERT_OK_AND_ASSIGN(ProcessResult p,
                       RunModelfs({"pull", "--plain-http", HostileRef("hardlink-in"), dest}));
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_EQ(ReadFileOrDie(dest + "/models/w-alias.bin"), weights);
  struct stat one, two;
  ASSERT_EQ(stat((dest + "/models/w.bin").c_str(), &one), 0);
  ASSERT_EQ(stat((dest + "/models/w-alias.bin").c_str(), &two), 0);
  EXPECT_EQ(one.st_ino, two.st_ino);
  EXPECT_EQ(one.st_nlink, 2u);
}

}  // namespace
}  // namespace modelfs::testing
