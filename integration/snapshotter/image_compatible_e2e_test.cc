// The image-compatible volume image (docs/volume-image.md, "The image-compatible profile"):
// `modelfs push --tar --image-compatible --path-prefix models` writes a V whose layers are M's
// own tar blobs and then `.modelfs/`. The same V, by the same pod spec, is
//   - pulled as an ordinary image by an upstream containerd release (2.1.4, 2.2.2 or 2.3.4:
//     $MODELFS_CONTAINERD_RELEASE, containerd_release.h) with its own overlayfs snapshotter (no
//     modelfs): the pod sees every model file byte-identical (eager);
//   - mounted lazily by the same containerd with the modelfs snapshotter: the same files, the
//     registry log shows no blob GET by containerd and only range reads of the weights;
//   - copied by `skopeo copy`, and its files reached by `buildah from` + `buildah copy --from`.
// With `lazy_images`, ordinary images (modelcars) with a volume image among their referrers are
// served lazily too: their lower layers unpacked by the snapshotter as containerd would, and a
// top layer whose V is `modelfs convert`'s (the image's merged tree) seen as containerd unpacks
// the image, its whiteouts included, in an image volume and in a container's rootfs.
// Without root, FUSE, the containerd release, skopeo, buildah or the daemon the test skips, except
// with CI=true, where it fails.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/oci/digest.h"
#include "core/oci/manifest.h"
#include "core/oci/media_types.h"
#include "core/oci/tar.h"
#include "core/oci/tar_headers.h"
#include "core/oci/volume_image.h"
#include "core/status/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration/snapshotter/snapshotter_daemon.h"
#include "nlohmann/json.hpp"
#include "testsupport/cri/cri_client.h"
#include "testsupport/harness/containerd_fixture.h"
#include "testsupport/harness/containerd_release.h"
#include "testsupport/harness/process_runner.h"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/compress.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kModelRepo[] = "e2e/compat";
constexpr char kBusyboxRepo[] = "e2e/busybox";
constexpr char kModelcarRepo[] = "e2e/modelcars";
constexpr char kBusyboxBinary[] = "/bin/busybox";
constexpr char kHashEveryFile[] =
    "cd /models && find . -type f | sort | while read -r f; do sha256sum \"$f\"; done";

std::map<std::string, std::string> ParseSha256sum(const std::string& out) {
  std::map<std::string, std::string> files;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits("  ", 1));
    if (f.size() != 2) continue;
    std::string path = f[1];
    if (absl::StartsWith(path, "./")) path = path.substr(2);
    files[path] = "sha256:" + f[0];
  }
  return files;
}

// Every regular file under `dir`: relative path -> digest.
std::map<std::string, std::string> HashTree(const fs::path& dir) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_regular_file() && !it->is_symlink()) {
      out[fs::relative(it->path(), dir).string()] =
          Digest::Of(ReadFileOrDie(it->path().string())).str();
    }
  }
  return out;
}

// What containerd's overlay snapshotter keeps of one layer, as text: every entry under `dir`
// (the root excluded) with its type, mode, owner, mtime, size, rdev, content or link target
// digest and xattrs. A whiteout's (0/0 character device) mtime is the time it was made, not
// the layer's, and is left out.
std::string TreeSignature(const fs::path& dir) {
  std::vector<std::string> lines;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    const fs::path& p = it->path();
    struct stat st;
    if (lstat(p.c_str(), &st) != 0) continue;
    std::string content;
    if (S_ISREG(st.st_mode)) content = Digest::Of(ReadFileOrDie(p.string())).str();
    if (S_ISLNK(st.st_mode)) content = fs::read_symlink(p).string();
    const bool whiteout = S_ISCHR(st.st_mode) && st.st_rdev == 0;
    std::string xattrs;
    char names[4096];
    const ssize_t len = llistxattr(p.c_str(), names, sizeof names);
    std::vector<std::string> sorted;
    for (ssize_t i = 0; i < len;) {
      const std::string name(names + i);
      i += static_cast<ssize_t>(name.size()) + 1;
      char value[4096];
      const ssize_t v = lgetxattr(p.c_str(), name.c_str(), value, sizeof value);
      sorted.push_back(absl::StrCat(name, "=", v < 0 ? "?" : std::string(value, v)));
    }
    std::sort(sorted.begin(), sorted.end());
    lines.push_back(
        absl::StrCat(p.lexically_relative(dir).string(), " mode=", absl::Hex(st.st_mode),
                     " uid=", st.st_uid, " gid=", st.st_gid,
                     whiteout ? std::string()
                              : absl::StrCat(" mtime=", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec),
                     S_ISDIR(st.st_mode) ? std::string() : absl::StrCat(" size=", st.st_size),
                     " rdev=", st.st_rdev, " ", content, " ", absl::StrJoin(sorted, ",")));
  }
  std::sort(lines.begin(), lines.end());
  return absl::StrJoin(lines, "\n");
}

// The signature of each snapshot directory <snapshots>/<id>/fs.
std::vector<std::string> SnapshotSignatures(const fs::path& snapshots) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(snapshots, ec)) {
    if (fs::is_directory(d.path() / "fs")) out.push_back(TreeSignature(d.path() / "fs"));
  }
  return out;
}

// Writes `content` at `dir`/`rel` with the given owner, mode and mtime.
void StageFile(const fs::path& dir, const std::string& rel, const std::string& content, uid_t uid,
               gid_t gid, mode_t mode, time_t mtime) {
  fs::create_directories((dir / rel).parent_path());
  std::ofstream(dir / rel, std::ios::binary) << content;
  ASSERT_EQ(lchown((dir / rel).c_str(), uid, gid), 0);
  ASSERT_EQ(chmod((dir / rel).c_str(), mode), 0);
  const struct timespec t[2] = {{mtime, 0}, {mtime, 250'000'000}};
  ASSERT_EQ(utimensat(AT_FDCWD, (dir / rel).c_str(), t, AT_SYMLINK_NOFOLLOW), 0);
}

// A tar of `dir` as GNU tar writes one in the pax format, with owners and xattrs.
std::string TarOf(const fs::path& dir) {
  absl::StatusOr<ProcessResult> r =
      RunProcess({"tar", "--xattrs", "--xattrs-include=*", "--format=posix", "--numeric-owner",
                  "--sort=name", "-C", dir.string(), "-cf", "-", "."});
  EXPECT_OK(r.status());
  if (!r.ok()) return "";
  EXPECT_EQ(r->exit_code, 0) << r->err;
  return r->out;
}

class ImageCompatibleE2eTest : public ::testing::Test {
 protected:
  void MissingComponent(const std::string& why) {
    if (RunningInCi()) FAIL() << why << " (CI=true: this test must run in CI)";
    GTEST_SKIP() << why;
  }

  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(const ContainerdRelease under_test, ContainerdReleaseUnderTest());
    std::cout << "[containerd] release " << under_test.version << "\n";
    absl::StatusOr<std::string> release = ContainerdReleaseDir(under_test);
    if (!release.ok()) return MissingComponent(std::string(release.status().message()));
    release_ = *release;
    config_version_ = under_test.config_version;
    for (const std::string& why :
         {Containerd::WhyUnavailable(release_), SnapshotterDaemon::WhyUnavailable(),
          std::string(access(kBusyboxBinary, X_OK) == 0 ? "" : "no /bin/busybox"),
          std::string(access("/usr/bin/skopeo", X_OK) == 0 ? "" : "no skopeo"),
          std::string(access("/usr/bin/buildah", X_OK) == 0 ? "" : "no buildah")}) {
      if (!why.empty()) return MissingComponent(why);
    }
    RegistryFixtureOptions ro;
    ro.access_log = true;
    ASSERT_OK_AND_ASSIGN(registry_, RegistryFixture::Start(ro));
    std::vector<LayerFile> files = {{"bin/busybox", ReadFileOrDie(kBusyboxBinary), 0755, ""}};
    for (const char* applet : {"sh", "cat", "sha256sum", "sleep", "find", "sort", "echo"}) {
      files.push_back({absl::StrCat("bin/", applet), "", 0777, "busybox"});
    }
    ASSERT_OK_AND_ASSIGN(busybox_, PushOrdinaryImage(registry_->host_port(), kBusyboxRepo, "1.35",
                                                     {files}, {"/bin/sleep", "86400"}));
    source_ = tmp_.Join("model").string();
    ASSERT_OK(WriteTestModel(source_, /*seed=*/33).status());
    ASSERT_OK_AND_ASSIGN(
        ProcessResult push,
        RunModelfs({"push", "--plain-http",
                    absl::StrCat(registry_->host_port(), "/", kModelRepo, ":v1"), source_, "--tar",
                    "--image-compatible", "--path-prefix", "models", "--json"}));
    ASSERT_EQ(push.exit_code, 0) << push.err;
    push_ = ParseJsonOutput(push.out);
    volume_ref_ = absl::StrCat(registry_->host_port(), "/", kModelRepo, ":v1-volume");
    // What a pod must see under /models: the files under models/, and V's .modelfs/.
    for (const auto& [path, digest] : DescribeFiles(source_)) want_["models/" + path] = digest;
  }

  void TearDown() override {
    DeletePods();
    if (HasFailure() && daemon_ != nullptr) {
      std::string log = ReadFileOrDie(daemon_->log_path());
      std::cerr << "--- modelfs-snapshotter log (tail) ---\n"
                << log.substr(log.size() > 12000 ? log.size() - 12000 : 0) << "\n";
    }
    if (HasFailure() && containerd_ != nullptr) {
      std::string log = ReadFileOrDie(containerd_->log_path());
      std::cerr << "--- containerd log (tail) ---\n"
                << log.substr(log.size() > 12000 ? log.size() - 12000 : 0) << "\n";
    }
  }

  void DeletePods() {
    for (const std::string& id : containers_) {
      EXPECT_OK(runtime_->StopContainer(id, absl::Seconds(5)));
      EXPECT_OK(runtime_->RemoveContainer(id));
    }
    containers_.clear();
    for (const std::string& id : sandboxes_) {
      EXPECT_OK(runtime_->StopPodSandbox(id));
      EXPECT_OK(runtime_->RemovePodSandbox(id));
    }
    sandboxes_.clear();
  }

  // The containerd release under test with CRI pulling into `snapshotter` ("overlayfs", or
  // "modelfs" with the daemon started first).
  void StartContainerd(const std::string& name, bool with_modelfs,
                       const std::string& daemon_toml = "") {
    const std::string socket = tmp_.Join(name + ".sock").string();
    ContainerdOptions co;
    co.release_dir = release_;
    co.config_version = config_version_;
    co.registry_host_port = registry_->host_port();
    co.cri = true;
    co.sandbox_image = busybox_.reference;
    co.socket_path = socket;
    if (with_modelfs) {
      SnapshotterDaemonOptions so;
      so.insecure_hosts = {registry_->host_port()};
      so.containerd_address = socket;
      so.top_level_config = daemon_toml;
      so.policy = daemon_policy_;
      ASSERT_OK_AND_ASSIGN(daemon_, SnapshotterDaemon::Start(so));
      co.proxy_snapshotter_name = "modelfs";
      co.proxy_snapshotter_address = daemon_->socket_path();
      co.cri_snapshotter = "modelfs";
    } else {
      co.proxy_snapshotter_address = "";
      co.cri_snapshotter = "overlayfs";
    }
    ASSERT_OK_AND_ASSIGN(containerd_, Containerd::Start(co));
    ASSERT_OK_AND_ASSIGN(images_, CriImageClient::Connect(containerd_->grpc_target()));
    ASSERT_OK_AND_ASSIGN(runtime_, CriRuntimeClient::Connect(containerd_->grpc_target()));
  }

  void StopContainerd() {
    DeletePods();
    runtime_.reset();
    images_.reset();
    containerd_.reset();
    daemon_.reset();
  }

  // A pod with V as an image volume at /models and a reader hashing every file: what it saw.
  std::map<std::string, std::string> RunPod(const std::string& name) {
    return RunPod(name, volume_ref_);
  }
  std::map<std::string, std::string> RunPod(const std::string& name, const std::string& ref) {
    CriPodSpec pod;
    pod.name = name;
    pod.uid = name + "-uid";
    pod.log_directory = tmp_.Join("pods/" + name).string();
    fs::create_directories(pod.log_directory);
    absl::StatusOr<std::string> sandbox = runtime_->RunPodSandbox(pod);
    EXPECT_OK(sandbox.status());
    if (!sandbox.ok()) return {};
    sandboxes_.push_back(*sandbox);
    absl::StatusOr<std::string> volume = images_->PullImageForPod(ref, pod);
    EXPECT_OK(volume.status());
    if (!volume.ok()) return {};
    CriContainerSpec c;
    c.name = "reader";
    c.image = busybox_.reference;
    c.command = {"/bin/sh", "-c", kHashEveryFile};
    c.mounts = {{"/models", "", *volume, true, sub_path_}};
    c.log_path = "reader.log";
    absl::StatusOr<std::string> id = runtime_->CreateContainer(*sandbox, c, pod);
    EXPECT_OK(id.status());
    if (!id.ok()) return {};
    containers_.push_back(*id);
    EXPECT_OK(runtime_->StartContainer(*id));
    absl::StatusOr<CriContainerStatus> st = runtime_->WaitForExit(*id, absl::Minutes(3));
    EXPECT_OK(st.status());
    const std::string out = ParseCriLog(ReadFileOrDie(pod.log_directory + "/reader.log"));
    if (st.ok()) {
      EXPECT_EQ(st->exit_code, 0) << out;
    }
    return ParseSha256sum(out);
  }

  // The files of V's .modelfs/ the pod must see too (from the registry's copy of A).
  std::map<std::string, std::string> VolumeFilesWanted() {
    std::map<std::string, std::string> out;
    absl::StatusOr<std::unique_ptr<RegistryClient>> client =
        ConnectPlainHttp(registry_->host_port());
    EXPECT_OK(client.status());
    if (!client.ok()) return out;
    absl::StatusOr<ManifestResult> vm = (*client)->GetManifest(kModelRepo, "v1-volume");
    EXPECT_OK(vm.status());
    if (!vm.ok()) return out;
    absl::StatusOr<Manifest> v = ParseManifest(vm->bytes);
    EXPECT_OK(v.status());
    if (!v.ok()) return out;
    manifest_ = *v;
    absl::StatusOr<std::string> a = FetchBlob(**client, kModelRepo, v->layers.back().digest.str());
    EXPECT_OK(a.status());
    if (!a.ok()) return out;
    VolumeFiles files;
    EXPECT_OK(AddVolumeLayerFiles(*a, files));
    for (const auto& [path, bytes] : files) out[path] = Digest::Of(std::string(bytes)).str();
    return out;
  }

  // An ordinary image I (tag `tag` in kModelRepo): `lower_tars` as gzip layers, then M's
  // tars; and V' (M's volume image) with I as its subject, listed under I's referrers
  // fallback tag. `wrong_diff_id`: the config gives the first layer another diff ID.
  struct LazyImage {
    Digest digest;
    std::vector<Descriptor> layers;
    std::vector<Digest> diff_ids;
  };
  // A layer another tool wrote: its blob as pushed, its media type and diff ID.
  struct BuiltLayer {
    std::string media_type;
    std::string blob;
    Digest diff_id;
  };
  absl::StatusOr<LazyImage> PushLazyImage(const std::string& tag,
                                          const std::vector<std::string>& lower_tars,
                                          bool wrong_diff_id = false,
                                          const std::vector<BuiltLayer>& built = {}) {
    ASSIGN_OR_RETURN(std::unique_ptr<RegistryClient> client,
                     ConnectPlainHttp(registry_->host_port()));
    LazyImage out;
    for (const BuiltLayer& b : built) {
      ASSIGN_OR_RETURN(Digest d, UploadBlob(*client, kModelRepo, b.blob));
      out.layers.push_back({b.media_type, d, b.blob.size()});
      out.diff_ids.push_back(b.diff_id);
    }
    for (const std::string& tar : lower_tars) {
      const std::string gz = Gzip(tar);
      ASSIGN_OR_RETURN(Digest d, UploadBlob(*client, kModelRepo, gz));
      out.layers.push_back({"application/vnd.oci.image.layer.v1.tar+gzip", d, gz.size()});
      out.diff_ids.push_back(Digest::Of(tar));
    }
    if (wrong_diff_id) out.diff_ids[0] = Digest::Of("not the layer's tar");
    for (size_t i = 0; i + 1 < manifest_.layers.size(); ++i) {
      Descriptor l = manifest_.layers[i];
      l.annotations.clear();
      out.layers.push_back(l);
      out.diff_ids.push_back(l.digest);
    }
    nlohmann::json diff_ids = nlohmann::json::array();
    for (const Digest& d : out.diff_ids) diff_ids.push_back(d.str());
    const std::string config =
        nlohmann::json({{"architecture", "amd64"},
                        {"os", "linux"},
                        {"rootfs", {{"type", "layers"}, {"diff_ids", diff_ids}}}})
            .dump();
    ASSIGN_OR_RETURN(Digest config_digest, UploadBlob(*client, kModelRepo, config));
    Manifest image;
    image.schema_version = 2;
    image.media_type = "application/vnd.oci.image.manifest.v1+json";
    image.config = {"application/vnd.oci.image.config.v1+json", config_digest, config.size()};
    image.layers = out.layers;
    const std::string image_json = SerializeManifest(image);
    ASSIGN_OR_RETURN(out.digest, client->PutManifest(kModelRepo, tag, image_json,
                                                     "application/vnd.oci.image.manifest.v1+json"));
    Manifest v = manifest_;
    v.subject =
        Descriptor{"application/vnd.oci.image.manifest.v1+json", out.digest, image_json.size()};
    const std::string v_json = SerializeManifest(v);
    ASSIGN_OR_RETURN(Digest v_digest,
                     client->PutManifest(kModelRepo, tag + "-volume", v_json,
                                         "application/vnd.oci.image.manifest.v1+json"));
    Descriptor vd{"application/vnd.oci.image.manifest.v1+json", v_digest, v_json.size()};
    vd.artifact_type = std::string(kVolumeImageArtifactType);
    RETURN_IF_ERROR(client->PutReferrersFallback(kModelRepo, out.digest, SerializeDescriptor(vd)));
    return out;
  }

  // `buildah` with this test's own storage (vfs: no mounts of its own), never the host's; its
  // trimmed stdout.
  std::string Buildah(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"buildah",
                                     "--root",
                                     tmp_.Join("buildah/root").string(),
                                     "--runroot",
                                     tmp_.Join("buildah/run").string(),
                                     "--storage-driver",
                                     "vfs"};
    argv.insert(argv.end(), args.begin(), args.end());
    absl::StatusOr<ProcessResult> r =
        RunProcess(argv, {{"BUILDAH_ISOLATION", "chroot"}}, absl::Minutes(5));
    EXPECT_OK(r.status());
    if (!r.ok()) return "";
    EXPECT_EQ(r->exit_code, 0) << absl::StrJoin(args, " ") << ": " << r->err;
    return std::string(absl::StripAsciiWhitespace(r->out));
  }

  // A KServe modelcar as buildah builds one, pushed with gzip layers to kModelcarRepo:`tag`:
  // a busybox base (the static binary, links to it, /etc/motd and /etc/keep), then M's files
  // under /models; with `whiteout_top`, a third layer that removes /etc/motd (a `.wh.` whiteout
  // in the top layer). Then `modelfs convert` writes its volume image V (the image's merged
  // tree) and lists it under the image's referrers fallback tag. Returns the image's reference.
  std::string PushConvertedModelcar(const std::string& tag, bool whiteout_top) {
    const fs::path base = tmp_.Join("modelcar-base");
    if (!fs::exists(base)) {
      fs::create_directories(base / "bin");
      fs::copy_file(kBusyboxBinary, base / "bin/busybox");
      fs::create_symlink("busybox", base / "bin/sh");
      fs::create_symlink("busybox", base / "bin/rm");
      StageFile(base, "etc/motd", "welcome\n", 0, 0, 0644, 1'500'000'030);
      StageFile(base, "etc/keep", "kept\n", 1000, 1000, 0640, 1'500'000'031);
    }
    const std::string c1 = Buildah({"from", "scratch"});
    Buildah({"copy", c1, base.string(), "/"});
    Buildah({"commit", "-q", c1, tag + "-base"});
    const std::string c2 = Buildah({"from", tag + "-base"});
    Buildah({"copy", c2, source_, "/models/"});
    Buildah({"commit", "-q", c2, tag});
    if (whiteout_top) {
      const std::string c3 = Buildah({"from", tag});
      Buildah({"run", "--isolation", "chroot", c3, "--", "/bin/rm", "/etc/motd"});
      Buildah({"commit", "-q", c3, tag});
    }
    const std::string ref = absl::StrCat(registry_->host_port(), "/", kModelcarRepo, ":", tag);
    Buildah({"push", "-q", "--tls-verify=false", "--compression-format", "gzip", tag,
             "docker://" + ref});
    Buildah({"rm", "--all"});
    absl::StatusOr<ProcessResult> convert = RunModelfs({"convert", "--plain-http", "--json", ref});
    EXPECT_OK(convert.status());
    if (!convert.ok()) return ref;
    EXPECT_EQ(convert->exit_code, 0) << convert->err;
    // V's model is the image itself: the snapshotter serves the image's whole tree.
    absl::StatusOr<std::unique_ptr<RegistryClient>> client =
        ConnectPlainHttp(registry_->host_port());
    EXPECT_OK(client.status());
    if (!client.ok()) return ref;
    absl::StatusOr<ManifestResult> image = (*client)->GetManifest(kModelcarRepo, tag);
    EXPECT_OK(image.status());
    if (image.ok() && convert->exit_code == 0) {
      EXPECT_EQ(ParseJsonOutput(convert->out)["model"]["digest"], image->digest.str());
    }
    return ref;
  }

  // A pod whose container's rootfs is `ref` (pulled for the pod as a kubelet would), hashing
  // /etc/motd and /etc/keep where they exist and every file under /models: what it saw, by
  // path from the root.
  std::map<std::string, std::string> RunRootfsPod(const std::string& name, const std::string& ref) {
    CriPodSpec pod;
    pod.name = name;
    pod.uid = name + "-uid";
    pod.log_directory = tmp_.Join("pods/" + name).string();
    fs::create_directories(pod.log_directory);
    absl::StatusOr<std::string> sandbox = runtime_->RunPodSandbox(pod);
    EXPECT_OK(sandbox.status());
    if (!sandbox.ok()) return {};
    sandboxes_.push_back(*sandbox);
    absl::StatusOr<std::string> image = images_->PullImageForPod(ref, pod);
    EXPECT_OK(image.status());
    if (!image.ok()) return {};
    CriContainerSpec c;
    c.name = "rootfs";
    c.image = *image;
    c.command = {"/bin/sh", "-c",
                 "cd / && for f in etc/motd etc/keep; do if [ -e \"$f\" ]; then /bin/busybox "
                 "sha256sum \"$f\"; fi; done; /bin/busybox find models -type f | /bin/busybox sort "
                 "| while read -r f; do /bin/busybox sha256sum \"$f\"; done"};
    c.log_path = "rootfs.log";
    absl::StatusOr<std::string> id = runtime_->CreateContainer(*sandbox, c, pod);
    EXPECT_OK(id.status());
    if (!id.ok()) return {};
    containers_.push_back(*id);
    EXPECT_OK(runtime_->StartContainer(*id));
    absl::StatusOr<CriContainerStatus> st = runtime_->WaitForExit(*id, absl::Minutes(3));
    EXPECT_OK(st.status());
    const std::string out = ParseCriLog(ReadFileOrDie(pod.log_directory + "/rootfs.log"));
    if (st.ok()) {
      EXPECT_EQ(st->exit_code, 0) << out;
    }
    return ParseSha256sum(out);
  }

  std::string LazyModelcarsToml() const {
    return absl::StrCat("lazy_images = [\"", registry_->host_port(), "/", kModelcarRepo, "\"]\n");
  }

  TempDir tmp_;
  int config_version_ = 3;     // the release's own config version
  std::string daemon_policy_;  // the snapshotter's signature policy file ("": none)
  std::string release_;
  std::unique_ptr<RegistryFixture> registry_;
  PushedImage busybox_;
  std::string source_;
  nlohmann::json push_;
  std::string volume_ref_;
  std::map<std::string, std::string> want_;
  Manifest manifest_;
  std::unique_ptr<SnapshotterDaemon> daemon_;
  std::unique_ptr<Containerd> containerd_;
  std::unique_ptr<CriImageClient> images_;
  std::unique_ptr<CriRuntimeClient> runtime_;
  std::vector<std::string> sandboxes_, containers_;
  std::string sub_path_;  // RunPod's volume subPath (CRI image_sub_path); "" for the whole image
};

TEST_F(ImageCompatibleE2eTest, OneSpecIsEagerWithoutModelfsAndLazyWithIt) {
  std::map<std::string, std::string> want = want_;
  for (const auto& [path, digest] : VolumeFilesWanted()) want[path] = digest;
  ASSERT_FALSE(HasFailure());
  // V's layers: M's tars (role model, M's blob digests), then A.
  ASSERT_GE(manifest_.layers.size(), 2u);
  const size_t model_layers = manifest_.layers.size() - 1;
  for (size_t i = 0; i < model_layers; ++i) {
    ASSERT_NE(manifest_.layers[i].Annotation(kLabelRole), nullptr);
    EXPECT_EQ(*manifest_.layers[i].Annotation(kLabelRole), "model");
  }

  // Without modelfs: containerd's overlayfs unpacks V whole.
  StartContainerd("plain", /*with_modelfs=*/false);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(RunPod("eager"), want);
  StopContainerd();

  // With modelfs: the same spec, lazily.
  const size_t offset = ReadFileOrDie(registry_->log_path()).size();
  StartContainerd("lazy", /*with_modelfs=*/true);
  ASSERT_FALSE(HasFatalFailure());
  std::map<std::string, std::string> seen = RunPod("lazy");
  EXPECT_EQ(seen.erase(".modelinfo.json"), 1u);
  EXPECT_EQ(seen, want);
  const std::string log = ReadFileOrDie(registry_->log_path()).substr(offset);
  int weight_gets = 0;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (!absl::StrContains(line, absl::StrCat("GET /v2/", kModelRepo, "/blobs/"))) continue;
    // containerd fetches V's config and none of its layers: every layer was answered as a
    // remote snapshot.
    if (!absl::StrContains(line, manifest_.config.digest.str())) {
      EXPECT_FALSE(absl::StrContains(line, "\"containerd/")) << line;
    }
    for (size_t i = 0; i < model_layers; ++i) {
      const Descriptor& l = manifest_.layers[i];
      if (l.size < (1u << 20) || !absl::StrContains(line, l.digest.str())) continue;
      // The daemon reads the weights by range (HTTP 206).
      ++weight_gets;
      EXPECT_TRUE(absl::StrContains(line, "\" 206 ")) << line;
    }
  }
  EXPECT_GT(weight_gets, 0);
  const std::string daemon_log = ReadFileOrDie(daemon_->log_path());
  EXPECT_TRUE(absl::StrContains(daemon_log, "answered as remote")) << daemon_log;
  StopContainerd();
}

TEST_F(ImageCompatibleE2eTest, SkopeoCopiesItAndBuildahCopiesItsFiles) {
  const std::string src = absl::StrCat("docker://", volume_ref_);
  const std::string layout = tmp_.Join("oci-copy").string();
  ASSERT_OK_AND_ASSIGN(ProcessResult copy, RunProcess({"skopeo", "copy", "--src-tls-verify=false",
                                                       src, absl::StrCat("oci:", layout, ":v1")}));
  ASSERT_EQ(copy.exit_code, 0) << copy.err;
  // And back into another repository of the registry.
  ASSERT_OK_AND_ASSIGN(
      ProcessResult back,
      RunProcess({"skopeo", "copy", "--dest-tls-verify=false", absl::StrCat("oci:", layout, ":v1"),
                  absl::StrCat("docker://", registry_->host_port(), "/e2e/copied:v1")}));
  ASSERT_EQ(back.exit_code, 0) << back.err;

  // buildah with its own storage (vfs: no mounts of its own), never the host's.
  const std::vector<std::string> buildah = {"buildah",
                                            "--root",
                                            tmp_.Join("buildah/root").string(),
                                            "--runroot",
                                            tmp_.Join("buildah/run").string(),
                                            "--storage-driver",
                                            "vfs"};
  auto run = [&](std::vector<std::string> args) -> ProcessResult {
    std::vector<std::string> argv = buildah;
    argv.insert(argv.end(), args.begin(), args.end());
    absl::StatusOr<ProcessResult> r =
        RunProcess(argv, {{"BUILDAH_ISOLATION", "chroot"}}, absl::Minutes(5));
    EXPECT_OK(r.status());
    return r.ok() ? *r : ProcessResult{};
  };
  ProcessResult from = run({"from", "--tls-verify=false", "--name", "v", volume_ref_});
  ASSERT_EQ(from.exit_code, 0) << from.err;
  ProcessResult scratch = run({"from", "--name", "out", "scratch"});
  ASSERT_EQ(scratch.exit_code, 0) << scratch.err;
  ProcessResult cp = run({"copy", "--from", "v", "out", "/models", "/copied"});
  ASSERT_EQ(cp.exit_code, 0) << cp.err;
  ProcessResult mnt = run({"mount", "out"});
  ASSERT_EQ(mnt.exit_code, 0) << mnt.err;
  std::string root(absl::StripAsciiWhitespace(mnt.out));
  std::map<std::string, std::string> got = HashTree(fs::path(root) / "copied");
  std::map<std::string, std::string> want;
  for (const auto& [path, digest] : want_)
    want[path.substr(std::string("models/").size())] = digest;
  EXPECT_EQ(got, want);
  run({"umount", "out"});
  run({"rm", "--all"});
}

TEST_F(ImageCompatibleE2eTest, ARawLayerModelIsRefusedAsItWouldCopyItsBytes) {
  ASSERT_OK_AND_ASSIGN(
      ProcessResult raw,
      RunModelfs({"push", "--plain-http", absl::StrCat(registry_->host_port(), "/e2e/raw:v1"),
                  source_, "--json"}));
  ASSERT_EQ(raw.exit_code, 0) << raw.err;
  ASSERT_OK_AND_ASSIGN(ProcessResult convert,
                       RunModelfs({"convert", "--plain-http", "--image-compatible", "--volume-tag",
                                   "compat", absl::StrCat(registry_->host_port(), "/e2e/raw:v1")}));
  EXPECT_EQ(convert.exit_code, 2) << convert.err;
  EXPECT_TRUE(absl::StrContains(convert.err, "would copy its bytes")) << convert.err;
  ASSERT_OK_AND_ASSIGN(
      ProcessResult push,
      RunModelfs({"push", "--plain-http", absl::StrCat(registry_->host_port(), "/e2e/raw:v2"),
                  source_, "--image-compatible"}));
  EXPECT_EQ(push.exit_code, 2) << push.err;
}

TEST_F(ImageCompatibleE2eTest, ConvertWithAPrefixRefusesTarMembersOutsideIt) {
  // M at v1 has its members under models/ (pushed with the prefix): convert with another prefix
  // is refused; with the same one it gives the same V as push did.
  ASSERT_OK_AND_ASSIGN(ProcessResult other,
                       RunModelfs({"convert", "--plain-http", "--image-compatible", "--path-prefix",
                                   "weights", "--volume-tag", "other",
                                   absl::StrCat(registry_->host_port(), "/", kModelRepo, ":v1")}));
  EXPECT_EQ(other.exit_code, 2) << other.err;
  EXPECT_TRUE(absl::StrContains(other.err, "not under --path-prefix weights")) << other.err;
  ASSERT_OK_AND_ASSIGN(ProcessResult same,
                       RunModelfs({"convert", "--plain-http", "--image-compatible", "--path-prefix",
                                   "models", "--volume-tag", "same", "--json",
                                   absl::StrCat(registry_->host_port(), "/", kModelRepo, ":v1")}));
  ASSERT_EQ(same.exit_code, 0) << same.err;
  EXPECT_EQ(ParseJsonOutput(same.out)["volume"]["digest"], push_["volume"]["digest"]);
}

// lazy_images and a referrer V that is not the image's own (here V of M, whose tars are the
// image's layers too): anyone who can push a referrer could otherwise put any model's bytes
// where the image's top layer is, checked against nothing the pod pinned. V is found, the
// layers below the top are unpacked by the snapshotter (checked against the image's diff
// IDs), and the top is unpacked by containerd, never served from V's model.
TEST_F(ImageCompatibleE2eTest, AVolumeImageOfAnotherModelAmongAnImagesReferrersIsNotFollowed) {
  VolumeFilesWanted();
  ASSERT_FALSE(HasFailure());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RegistryClient> client,
                       ConnectPlainHttp(registry_->host_port()));
  // I: M's tars (every layer of V but A), an ordinary config.
  std::vector<Descriptor> layers(manifest_.layers.begin(), manifest_.layers.end() - 1);
  nlohmann::json diff_ids = nlohmann::json::array();
  for (Descriptor& l : layers) {
    l.annotations.clear();
    diff_ids.push_back(l.digest.str());
  }
  const std::string config =
      nlohmann::json({{"architecture", "amd64"},
                      {"os", "linux"},
                      {"rootfs", {{"type", "layers"}, {"diff_ids", diff_ids}}}})
          .dump();
  ASSERT_OK_AND_ASSIGN(Digest config_digest, UploadBlob(*client, kModelRepo, config));
  Manifest image;
  image.schema_version = 2;
  image.media_type = "application/vnd.oci.image.manifest.v1+json";
  image.config = {"application/vnd.oci.image.config.v1+json", config_digest, config.size()};
  image.layers = layers;
  const std::string image_json = SerializeManifest(image);
  ASSERT_OK_AND_ASSIGN(Digest image_digest,
                       client->PutManifest(kModelRepo, "modelcar", image_json,
                                           "application/vnd.oci.image.manifest.v1+json"));
  // V': the volume image of M, with I as its subject, listed under I's fallback tag.
  Manifest v = manifest_;
  v.subject =
      Descriptor{"application/vnd.oci.image.manifest.v1+json", image_digest, image_json.size()};
  const std::string v_json = SerializeManifest(v);
  ASSERT_OK_AND_ASSIGN(Digest v_digest,
                       client->PutManifest(kModelRepo, "modelcar-volume", v_json,
                                           "application/vnd.oci.image.manifest.v1+json"));
  Descriptor vd{"application/vnd.oci.image.manifest.v1+json", v_digest, v_json.size()};
  vd.artifact_type = std::string(kVolumeImageArtifactType);
  ASSERT_OK(client->PutReferrersFallback(kModelRepo, image_digest, SerializeDescriptor(vd)));

  const size_t offset = ReadFileOrDie(registry_->log_path()).size();
  StartContainerd(
      "lazyimages", /*with_modelfs=*/true,
      absl::StrCat("lazy_images = [\"", registry_->host_port(), "/", kModelRepo, "\"]\n"));
  ASSERT_FALSE(HasFatalFailure());
  std::map<std::string, std::string> seen =
      RunPod("modelcar", absl::StrCat(registry_->host_port(), "/", kModelRepo, ":modelcar"));
  // Unpacked by containerd: the image's own tars, no .modelinfo.json.
  EXPECT_EQ(seen.count(".modelinfo.json"), 0u);
  EXPECT_EQ(seen, want_);
  const std::string log = ReadFileOrDie(registry_->log_path()).substr(offset);
  int lookups = 0;
  std::vector<std::string> containerd_fetched;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (absl::StrContains(line, "/referrers/") ||
        absl::StrContains(line, ReferrersFallbackTag(image_digest))) {
      ++lookups;
    }
    for (const Descriptor& l : layers) {
      if (absl::StrContains(line, "\"containerd/") && absl::StrContains(line, l.digest.str())) {
        containerd_fetched.push_back(std::string(line));
      }
    }
  }
  // The layers below the top were unpacked by the snapshotter (V was found; their bytes are
  // checked against the image's own diff IDs), the top one by containerd: V's model is not the
  // image, so it does not stand for the image's top layer (snapshotter.md, "Lazy plain
  // images").
  ASSERT_EQ(containerd_fetched.size(), 1u) << absl::StrJoin(containerd_fetched, "\n");
  EXPECT_TRUE(absl::StrContains(containerd_fetched[0], layers.back().digest.str()));
  std::cout << "[figures] lazy image: layer blobs fetched by containerd: "
            << containerd_fetched.size() << " of " << layers.size()
            << "; referrer lookups: " << lookups << "\n";
  // One lookup for the image (the referrers API's 404, then the fallback tag), kept for each
  // of its layers; the busybox reader (not listed) is never looked up.
  EXPECT_GE(lookups, 1);
  EXPECT_LE(lookups, 2);
  const std::string daemon_log = ReadFileOrDie(daemon_->log_path());
  EXPECT_FALSE(absl::StrContains(daemon_log, "(volume image " + v_digest.str())) << daemon_log;
  EXPECT_TRUE(absl::StrContains(daemon_log, "not the tree of")) << daemon_log;
  for (size_t i = 0; i + 1 < layers.size(); ++i) {
    EXPECT_TRUE(absl::StrContains(daemon_log,
                                  absl::StrCat(": layer ", i, " (", layers[i].digest.str(), ", ")))
        << "layer " << i << " not unpacked by the snapshotter:\n"
        << daemon_log;
  }
  StopContainerd();
}

// lazy_images, the layers below the top: a base layer (busybox, owners, a setgid directory,
// xattrs, a device node, a FIFO, a hard link) and a layer with a whiteout, an opaque directory
// and new files, both written by GNU tar, under M's tars. The snapshotter unpacks them itself
// (containerd fetches no blob of the image), into the same trees containerd's own overlayfs
// snapshotter unpacks, and the pod's volume shows the base file, not the whited-out ones.
TEST_F(ImageCompatibleE2eTest, ALazyImagesLowerLayersAreTheTreesContainerdUnpacks) {
  VolumeFilesWanted();
  ASSERT_FALSE(HasFailure());
  const fs::path base = tmp_.Join("stage-base"), upper = tmp_.Join("stage-upper");
  StageFile(base, "bin/busybox", "not really busybox", 0, 0, 0755, 1'500'000'000);
  ASSERT_EQ(symlink("busybox", (base / "bin/sh").c_str()), 0);
  ASSERT_EQ(link((base / "bin/busybox").c_str(), (base / "bin/ls").c_str()), 0);
  StageFile(base, "etc/base.txt", "kept\n", 1000, 1001, 0640, 1'500'000'001);
  ASSERT_EQ(lsetxattr((base / "etc/base.txt").c_str(), "user.origin", "e2e", 3, 0), 0);
  StageFile(base, "etc/gone.txt", "whited out\n", 0, 0, 0644, 1'500'000'002);
  StageFile(base, "opq/a.txt", "hidden by the opaque dir\n", 0, 0, 0644, 1'500'000'003);
  StageFile(base, "shared/setgid/f", "g\n", 0, 50, 0664, 1'500'000'004);
  ASSERT_EQ(chmod((base / "shared/setgid").c_str(), 02775), 0);
  fs::create_directories(base / "dev");
  ASSERT_EQ(mknod((base / "dev/null").c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
  ASSERT_EQ(mkfifo((base / "dev/fifo").c_str(), 0600), 0);
  StageFile(upper, "etc/.wh.gone.txt", "", 0, 0, 0644, 1'500'000'010);
  StageFile(upper, "opq/.wh..wh..opq", "", 0, 0, 0644, 1'500'000'011);
  StageFile(upper, "opq/b.txt", "new\n", 7, 8, 0600, 1'500'000'012);
  StageFile(upper, "new/deep/file", "deep\n", 0, 0, 04755, 1'500'000'013);
  ASSERT_FALSE(HasFailure());
  const std::string tars[2] = {TarOf(base), TarOf(upper)};
  ASSERT_FALSE(HasFailure());
  // Below them, a base layer as buildah writes one: busybox, its links (one absolute), a marker.
  const fs::path bb = tmp_.Join("stage-buildah");
  fs::create_directories(bb / "bin");
  fs::copy_file(kBusyboxBinary, bb / "bin/busybox");
  ASSERT_EQ(symlink("busybox", (bb / "bin/sh").c_str()), 0);
  ASSERT_EQ(symlink("/bin/busybox", (bb / "bin/ls").c_str()), 0);
  StageFile(bb, "etc/buildah-marker", "buildah\n", 0, 0, 0644, 1'500'000'020);
  ASSERT_FALSE(HasFailure());
  auto buildah = [&](std::vector<std::string> args) -> std::string {
    std::vector<std::string> argv = {"buildah",
                                     "--root",
                                     tmp_.Join("buildah/root").string(),
                                     "--runroot",
                                     tmp_.Join("buildah/run").string(),
                                     "--storage-driver",
                                     "vfs"};
    argv.insert(argv.end(), args.begin(), args.end());
    absl::StatusOr<ProcessResult> r =
        RunProcess(argv, {{"BUILDAH_ISOLATION", "chroot"}}, absl::Minutes(5));
    EXPECT_OK(r.status());
    if (!r.ok()) return "";
    EXPECT_EQ(r->exit_code, 0) << absl::StrJoin(args, " ") << ": " << r->err;
    return std::string(absl::StripAsciiWhitespace(r->out));
  };
  const std::string c = buildah({"from", "scratch"});
  buildah({"copy", c, bb.string(), "/"});
  buildah({"commit", "-q", c, "lazy-base"});
  buildah({"push", "-q", "--tls-verify=false", "--compression-format", "gzip", "lazy-base",
           absl::StrCat("docker://", registry_->host_port(), "/e2e/lazy-base:1")});
  buildah({"rm", "--all"});
  ASSERT_FALSE(HasFailure());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RegistryClient> client,
                       ConnectPlainHttp(registry_->host_port()));
  ASSERT_OK_AND_ASSIGN(ManifestResult bm, client->GetManifest("e2e/lazy-base", "1"));
  ASSERT_OK_AND_ASSIGN(Manifest bmanifest, ParseManifest(bm.bytes));
  ASSERT_EQ(bmanifest.layers.size(), 1u);
  ASSERT_OK_AND_ASSIGN(std::string bconfig,
                       FetchBlob(*client, "e2e/lazy-base", bmanifest.config.digest.str()));
  ASSERT_OK_AND_ASSIGN(std::vector<Digest> bdiff_ids, ParseImageConfigDiffIds(bconfig));
  ASSERT_OK_AND_ASSIGN(std::string bblob,
                       FetchBlob(*client, "e2e/lazy-base", bmanifest.layers[0].digest.str()));
  ASSERT_OK_AND_ASSIGN(LazyImage lazy,
                       PushLazyImage("modelcar-based", {tars[0], tars[1]}, /*wrong_diff_id=*/false,
                                     {{bmanifest.layers[0].media_type, bblob, bdiff_ids.at(0)}}));
  const std::vector<Descriptor>& layers = lazy.layers;
  const std::string ref = absl::StrCat(registry_->host_port(), "/", kModelRepo, ":modelcar-based");

  // containerd's own overlayfs snapshotter: the reference trees.
  StartContainerd("plainbased", /*with_modelfs=*/false);
  ASSERT_FALSE(HasFatalFailure());
  const std::map<std::string, std::string> stock = RunPod("stock", ref);
  std::vector<std::string> want_trees;
  for (const std::string& sig :
       SnapshotSignatures(fs::path(containerd_->root_dir()) /
                          "io.containerd.snapshotter.v1.overlayfs/snapshots")) {
    if (absl::StrContains(sig, "etc/gone.txt ") || absl::StrContains(sig, "opq/b.txt ") ||
        absl::StrContains(sig, "etc/buildah-marker ")) {
      want_trees.push_back(sig);
    }
  }
  StopContainerd();
  ASSERT_EQ(want_trees.size(), 3u);
  EXPECT_EQ(stock.count("etc/base.txt"), 1u);
  EXPECT_EQ(stock.count("etc/gone.txt"), 0u);
  EXPECT_EQ(stock.count("opq/a.txt"), 0u);
  EXPECT_EQ(stock.count("opq/b.txt"), 1u);
  EXPECT_EQ(stock.count("etc/buildah-marker"), 1u);

  const size_t offset = ReadFileOrDie(registry_->log_path()).size();
  StartContainerd(
      "lazybased", /*with_modelfs=*/true,
      absl::StrCat("lazy_images = [\"", registry_->host_port(), "/", kModelRepo, "\"]\n"));
  ASSERT_FALSE(HasFatalFailure());
  // V here is M's, not the image's own, so the top layer is unpacked by containerd
  // (AVolumeImageOfAnotherModelAmongAnImagesReferrersIsNotFollowed); the layers below it are
  // the snapshotter's.
  std::map<std::string, std::string> seen = RunPod("lazybased", ref);
  EXPECT_EQ(seen.count(".modelinfo.json"), 0u);
  EXPECT_EQ(seen, stock);
  const std::vector<std::string> trees =
      SnapshotSignatures(fs::path(daemon_->root()) / "snapshots");
  for (const std::string& want : want_trees) {
    EXPECT_NE(std::find(trees.begin(), trees.end(), want), trees.end())
        << "containerd's tree:\n"
        << want << "\nthe snapshotter's trees:\n"
        << absl::StrJoin(trees, "\n----\n");
  }
  const std::string log = ReadFileOrDie(registry_->log_path()).substr(offset);
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (!absl::StrContains(line, "\"containerd/")) continue;
    for (size_t i = 0; i + 1 < layers.size(); ++i) {
      EXPECT_FALSE(absl::StrContains(line, layers[i].digest.str())) << line;
    }
  }
  StopContainerd();
}

// A lower layer whose tar does not have the config's diff ID is never committed by the
// snapshotter: its Prepare falls back to containerd's unpacking (logged, naming the layer),
// which refuses the layer too, and the pull fails.
TEST_F(ImageCompatibleE2eTest, ALazyImagesLowerLayerWithAnotherDiffIdIsNeverCommitted) {
  VolumeFilesWanted();
  ASSERT_FALSE(HasFailure());
  const fs::path base = tmp_.Join("stage-base");
  StageFile(base, "etc/base.txt", "base\n", 0, 0, 0644, 1'500'000'000);
  ASSERT_FALSE(HasFailure());
  ASSERT_OK_AND_ASSIGN(LazyImage lazy,
                       PushLazyImage("wrong-diff-id", {TarOf(base)}, /*wrong_diff_id=*/true));
  StartContainerd(
      "lazywrong", /*with_modelfs=*/true,
      absl::StrCat("lazy_images = [\"", registry_->host_port(), "/", kModelRepo, "\"]\n"));
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_FALSE(
      images_->PullImage(absl::StrCat(registry_->host_port(), "/", kModelRepo, ":wrong-diff-id"))
          .ok());
  const std::string chain = ChainIdOf({lazy.diff_ids[0]}).str();
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<SnapshotsClient> snapshots,
      SnapshotsClient::Connect("unix://" + daemon_->socket_path(), "modelfs", "k8s.io"));
  ASSERT_OK_AND_ASSIGN(std::vector<SnapshotInfo> all, snapshots->List());
  // containerd's own extraction snapshot of the layer (active) may remain until its next
  // garbage collection; nothing is committed under the chain ID.
  for (const SnapshotInfo& info : all) {
    if (info.kind != SnapshotInfo::Kind::kCommitted) continue;
    EXPECT_FALSE(absl::StrContains(info.name, chain)) << info.name;
    auto ref = info.labels.find("containerd.io/snapshot.ref");
    EXPECT_TRUE(ref == info.labels.end() || ref->second != chain) << info.name;
  }
  const std::string daemon_log = ReadFileOrDie(daemon_->log_path());
  EXPECT_TRUE(absl::StrContains(
      daemon_log, "not served lazily (DATA_LOSS: layer " + lazy.layers[0].digest.str()))
      << daemon_log;
  StopContainerd();
}

// lazy_images with V from `modelfs convert IMAGE` (the image's merged tree): the modelcar's TOP
// layer deletes /etc/motd of its base layer (a whiteout). The image volume and a container
// whose rootfs is the image must not see it, as with containerd's own unpacking: the top's
// model directory already is the whole tree, so the lower layers' directories (unpacked by
// the snapshotter) are not stacked under it.
TEST_F(ImageCompatibleE2eTest, ALazyImagesTopLayerWhiteoutHidesTheFileOfALowerLayer) {
  const std::string ref = PushConvertedModelcar("whiteout-top", /*whiteout_top=*/true);
  ASSERT_FALSE(HasFailure());

  StartContainerd("stockwh", /*with_modelfs=*/false);
  ASSERT_FALSE(HasFatalFailure());
  const std::map<std::string, std::string> stock = RunPod("stockwh", ref);
  StopContainerd();
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(stock.count("etc/motd"), 0u);
  EXPECT_EQ(stock.count("etc/keep"), 1u);
  for (const auto& [path, digest] : want_) {
    EXPECT_EQ(stock.count(path) ? stock.at(path) : "", digest) << path;
  }

  StartContainerd("lazywh", /*with_modelfs=*/true, LazyModelcarsToml());
  ASSERT_FALSE(HasFatalFailure());
  std::map<std::string, std::string> seen = RunPod("lazywh", ref);
  EXPECT_EQ(seen.erase(".modelinfo.json"), 1u);
  EXPECT_EQ(seen, stock);
  EXPECT_EQ(seen.count("etc/motd"), 0u);

  std::map<std::string, std::string> want_rootfs = want_;
  want_rootfs["etc/keep"] = stock.count("etc/keep") ? stock.at("etc/keep") : "";
  EXPECT_EQ(RunRootfsPod("lazywhroot", ref), want_rootfs);
  const std::string daemon_log = ReadFileOrDie(daemon_->log_path());
  EXPECT_TRUE(absl::StrContains(daemon_log, "the image's whole tree")) << daemon_log;
  StopContainerd();
}

// The same with a top layer that only adds /models (buildah's `COPY model/ /models/`): the
// base layer's files are seen once, from the image's tree, byte-identical to containerd's.
TEST_F(ImageCompatibleE2eTest, ALazyImageWhoseTopLayerOnlyAddsModelsShowsTheBaseFilesOnce) {
  const std::string ref = PushConvertedModelcar("models-top", /*whiteout_top=*/false);
  ASSERT_FALSE(HasFailure());

  StartContainerd("stockmt", /*with_modelfs=*/false);
  ASSERT_FALSE(HasFatalFailure());
  const std::map<std::string, std::string> stock = RunPod("stockmt", ref);
  StopContainerd();
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(stock.count("etc/motd"), 1u);
  EXPECT_EQ(stock.count("etc/keep"), 1u);
  EXPECT_EQ(stock.count("bin/busybox"), 1u);

  const size_t offset = ReadFileOrDie(registry_->log_path()).size();
  StartContainerd("lazymt", /*with_modelfs=*/true, LazyModelcarsToml());
  ASSERT_FALSE(HasFatalFailure());
  std::map<std::string, std::string> seen = RunPod("lazymt", ref);
  EXPECT_EQ(seen.erase(".modelinfo.json"), 1u);
  EXPECT_EQ(seen, stock);
  // Every layer answered ALREADY_EXISTS (the top as the image's tree, those below unpacked by
  // the snapshotter), so containerd's unpacker fetched no layer blob of the image.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RegistryClient> client,
                       ConnectPlainHttp(registry_->host_port()));
  ASSERT_OK_AND_ASSIGN(ManifestResult image, client->GetManifest(kModelcarRepo, "models-top"));
  ASSERT_OK_AND_ASSIGN(Manifest m, ParseManifest(image.bytes));
  std::vector<std::string> containerd_fetched;
  for (absl::string_view line :
       absl::StrSplit(ReadFileOrDie(registry_->log_path()).substr(offset), '\n')) {
    for (const Descriptor& l : m.layers) {
      if (absl::StrContains(line, "\"containerd/") && absl::StrContains(line, l.digest.str())) {
        containerd_fetched.push_back(std::string(line));
      }
    }
  }
  EXPECT_THAT(containerd_fetched, ::testing::IsEmpty());
  std::cout << "[figures] lazy modelcar: layer blobs fetched by containerd: "
            << containerd_fetched.size() << " of " << m.layers.size() << "\n";
  std::map<std::string, std::string> want_rootfs = want_;
  for (const char* f : {"etc/motd", "etc/keep"}) {
    want_rootfs[f] = stock.count(f) ? stock.at(f) : "";
  }
  EXPECT_EQ(RunRootfsPod("lazymtroot", ref), want_rootfs);
  // The tree came from V's tar header records (nobody pinned this V), and the pods read it
  // once the records matched the layers' own verified bytes (tar_records_check.h).
  const std::string daemon_log = ReadFileOrDie(daemon_->log_path());
  EXPECT_TRUE(absl::StrContains(daemon_log, "listed from its tar header records")) << daemon_log;
  EXPECT_TRUE(absl::StrContains(daemon_log, "tar header records match the layers")) << daemon_log;
  EXPECT_FALSE(absl::StrContains(daemon_log, "tar header records refused")) << daemon_log;
  StopContainerd();
}

// lazy_images and a referrer V whose tar header records lie (a file's name changed in the
// records of the image's top layer, header checksums fixed up, everything else as convert
// wrote it): the modelcar is pulled and listed from the records at once, but no byte of it is
// served, and the daemon logs the refusal (core/model/tar_records_check.h).
TEST_F(ImageCompatibleE2eTest, ALazyImageWhoseReferrersTarHeaderRecordsLieServesNoByte) {
  const std::string ref = PushConvertedModelcar("forged", /*whiteout_top=*/false);
  ASSERT_FALSE(HasFailure());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RegistryClient> client,
                       ConnectPlainHttp(registry_->host_port()));
  ASSERT_OK_AND_ASSIGN(ManifestResult image, client->GetManifest(kModelcarRepo, "forged"));
  ASSERT_OK_AND_ASSIGN(Manifest m, ParseManifest(image.bytes));
  // V as convert wrote it, from the fallback tag's index.
  ASSERT_OK_AND_ASSIGN(ManifestResult fallback,
                       client->GetManifest(kModelcarRepo, ReferrersFallbackTag(image.digest)));
  const nlohmann::json index = nlohmann::json::parse(fallback.bytes);
  ASSERT_EQ(index["manifests"].size(), 1u) << fallback.bytes;
  ASSERT_OK_AND_ASSIGN(ManifestResult vm,
                       client->GetManifest(kModelcarRepo, index["manifests"][0]["digest"]));
  ASSERT_OK_AND_ASSIGN(Manifest v, ParseManifest(vm.bytes));
  ASSERT_OK_AND_ASSIGN(std::string a,
                       FetchBlob(*client, kModelcarRepo, v.layers.back().digest.str()));
  std::vector<std::string> index_layers;
  for (size_t i = 0; i + 1 < v.layers.size(); ++i) {
    ASSERT_OK_AND_ASSIGN(std::string l,
                         FetchBlob(*client, kModelcarRepo, v.layers[i].digest.str()));
    index_layers.push_back(std::move(l));
  }
  ASSERT_OK_AND_ASSIGN(VolumeLayerContents contents, ParseVolumeLayers(a, index_layers));
  // The lie: one file of the model under another name (its last letter changed).
  std::string victim;
  for (const auto& [path, digest] : want_) {
    if (absl::StartsWith(path, "models/")) victim = path.substr(path.rfind('/') + 1);
  }
  ASSERT_FALSE(victim.empty());
  std::string renamed = victim;
  renamed.back() = renamed.back() == 'x' ? 'y' : 'x';
  const Digest top = m.layers.back().digest;
  ASSERT_EQ(contents.tar_headers.count(top), 1u) << "convert wrote no records for the top layer";
  TarHeaders forged = contents.tar_headers.at(top);
  int changed = 0;
  for (TarHeaders::Extent& e : forged.extents) {
    for (size_t at = e.bytes.find(victim); at != std::string::npos;
         at = e.bytes.find(victim, at + 1)) {
      // A header block holding the name (ustar name, or a pax path in its payload) keeps a
      // valid checksum; a pax payload has none.
      const uint64_t block = (e.offset + at) / 512 * 512;
      const bool header =
          block >= e.offset && block + 512 <= e.offset + e.bytes.size() &&
          ParseTarHeaderBlock(std::string_view(e.bytes).substr(block - e.offset, 512)).ok();
      e.bytes.replace(at, victim.size(), renamed);
      ++changed;
      if (!header) continue;
      char* b = e.bytes.data() + (block - e.offset);
      memset(b + 148, ' ', 8);
      unsigned sum = 0;
      for (size_t i = 0; i < 512; ++i) sum += static_cast<unsigned char>(b[i]);
      char chk[8];
      snprintf(chk, sizeof(chk), "%06o", sum);
      memcpy(b + 148, chk, 7);
    }
  }
  ASSERT_GT(changed, 0) << victim << " is not in the records of " << top.str();
  VolumeImageInput vin;
  vin.model_manifest =
      Descriptor{m.media_type.empty() ? std::string(kOciManifestMediaType) : m.media_type,
                 image.digest, image.bytes.size()};
  vin.model = m;
  vin.repository = contents.model.repository;
  for (auto& [d, c] : contents.chunk_indexes) vin.chunk_indexes.push_back(c);
  for (auto& [d, si] : contents.seek_indexes) vin.seek_indexes.push_back(si);
  for (auto& [d, t] : contents.tensor_indexes) vin.tensor_indexes.push_back(t);
  for (auto& [d, h] : contents.tar_headers) vin.tar_headers.push_back(d == top ? forged : h);
  ASSERT_OK_AND_ASSIGN(VolumeImage fv, BuildVolumeImage(vin));
  for (const VolumeBlob& l : fv.index_layers) {
    ASSERT_OK(UploadBlob(*client, kModelcarRepo, l.bytes).status());
  }
  ASSERT_OK(UploadBlob(*client, kModelcarRepo, fv.layer).status());
  ASSERT_OK(UploadBlob(*client, kModelcarRepo, fv.config).status());
  ASSERT_OK(client
                ->PutManifest(kModelcarRepo, "forged-volume", fv.manifest_json,
                              "application/vnd.oci.image.manifest.v1+json")
                .status());
  // The forged V alone among the image's referrers.
  nlohmann::json forged_index = index;
  forged_index["manifests"] =
      nlohmann::json::array({nlohmann::json::parse(SerializeDescriptor(fv.manifest_descriptor))});
  ASSERT_OK(client
                ->PutManifest(kModelcarRepo, ReferrersFallbackTag(image.digest),
                              forged_index.dump(), "application/vnd.oci.image.index.v1+json")
                .status());

  StartContainerd("lazyforged", /*with_modelfs=*/true, LazyModelcarsToml());
  ASSERT_FALSE(HasFatalFailure());
  CriPodSpec pod;
  pod.name = "lazyforged";
  pod.uid = "lazyforged-uid";
  pod.log_directory = tmp_.Join("pods/lazyforged").string();
  fs::create_directories(pod.log_directory);
  ASSERT_OK_AND_ASSIGN(std::string sandbox, runtime_->RunPodSandbox(pod));
  sandboxes_.push_back(sandbox);
  // Pulled and ready: the tree comes from the records, which nobody has checked yet.
  ASSERT_OK_AND_ASSIGN(std::string volume, images_->PullImageForPod(ref, pod));
  CriContainerSpec c;
  c.name = "reader";
  c.image = busybox_.reference;
  c.command = {"/bin/sh", "-c",
               "cd /models && find . -type f | sort | while read -r f; do sha256sum \"$f\"; "
               "done; ls models"};
  c.mounts = {{"/models", "", volume, true, ""}};
  c.log_path = "reader.log";
  ASSERT_OK_AND_ASSIGN(std::string id, runtime_->CreateContainer(sandbox, c, pod));
  containers_.push_back(id);
  ASSERT_OK(runtime_->StartContainer(id));
  ASSERT_OK(runtime_->WaitForExit(id, absl::Minutes(3)).status());
  const std::string out = ParseCriLog(ReadFileOrDie(pod.log_directory + "/reader.log"));
  // Not one file of the image hashed: every read failed; the lying name was listed.
  // .modelinfo.json (made by modelfs) names the refusal for each weight file instead.
  std::map<std::string, std::string> hashed = ParseSha256sum(out);
  hashed.erase(".modelinfo.json");
  EXPECT_THAT(hashed, ::testing::IsEmpty()) << out;
  EXPECT_TRUE(absl::StrContains(out, renamed)) << out;
  const std::string daemon_log = ReadFileOrDie(daemon_->log_path());
  EXPECT_TRUE(absl::StrContains(daemon_log, "listed from its tar header records")) << daemon_log;
  EXPECT_TRUE(absl::StrContains(daemon_log, "tar header records refused")) << daemon_log;
  EXPECT_TRUE(absl::StrContains(daemon_log, "entry 'models/" + renamed + "'")) << daemon_log;
  StopContainerd();
}

// KServe's subPath on a modelcar named by the pod itself, served lazily (`lazy_images`): with
// `subPath: models` the pod sees exactly what containerd's own overlayfs shows it under the
// same subPath, the modelcar's models/ and nothing else. containerd 2.2 and later apply a
// subPath; 2.1 ignores it.
TEST_F(ImageCompatibleE2eTest, ALazyModelcarMountedWithSubPathModelsShowsWhatOverlayfsShows) {
  ASSERT_OK_AND_ASSIGN(const ContainerdRelease release, ContainerdReleaseUnderTest());
  if (!release.applies_image_sub_path) {
    GTEST_SKIP() << "containerd " << release.version << " ignores image_sub_path";
  }
  const std::string ref = PushConvertedModelcar("subpath", /*whiteout_top=*/false);
  ASSERT_FALSE(HasFailure());
  sub_path_ = "models";
  std::map<std::string, std::string> want;
  for (const auto& [path, digest] : want_)
    want[path.substr(std::string("models/").size())] = digest;

  StartContainerd("stocksp", /*with_modelfs=*/false);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(RunPod("stocksp", ref), want);
  StopContainerd();

  StartContainerd("lazysp", /*with_modelfs=*/true, LazyModelcarsToml());
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(RunPod("lazysp", ref), want);
  StopContainerd();
}

// With a signature policy, lazy_images fails closed: a modelcar the policy refuses fails its
// pull, naming the reason, where it used to be unpacked by containerd while the refusal alert
// fired. lazy_images_unpack_refused = true restores that eager unpack.
TEST_F(ImageCompatibleE2eTest, ALazyImageThePolicyRefusesFailsItsPullInsteadOfBeingUnpacked) {
  const std::string ref = PushConvertedModelcar("refused", /*whiteout_top=*/false);
  ASSERT_FALSE(HasFailure());
  daemon_policy_ = tmp_.WriteFile("policy.json", R"({"default":[{"type":"reject"}]})").string();
  const std::string toml = LazyModelcarsToml();
  StartContainerd("lazyrefused", /*with_modelfs=*/true, toml);
  ASSERT_FALSE(HasFatalFailure());
  absl::StatusOr<std::string> pulled = images_->PullImage(ref);
  ASSERT_FALSE(pulled.ok());
  EXPECT_THAT(std::string(pulled.status().message()), ::testing::HasSubstr("rejected_by_policy"));
  EXPECT_THAT(ReadFileOrDie(daemon_->log_path()), ::testing::HasSubstr("image refused by policy"));
  StopContainerd();

  StartContainerd("lazyunpack", /*with_modelfs=*/true,
                  absl::StrCat(toml, "lazy_images_unpack_refused = true\n"));
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_OK(images_->PullImage(ref).status());
  EXPECT_THAT(ReadFileOrDie(daemon_->log_path()),
              ::testing::HasSubstr("unpacking it (lazy_images_unpack_refused)"));
  StopContainerd();
}

}  // namespace
}  // namespace modelfs::testing
