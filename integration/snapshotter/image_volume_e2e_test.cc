// Pods with an image volume of the volume image V, on a real containerd 2.x release driven
// through CRI as a kubelet drives it: RunPodSandbox (host network, busybox as the pause image),
// PullImage of V with the pod's sandbox config, CreateContainer with `mounts[].image` set to
// the image_ref PullImage returned, StartContainer, ContainerStatus until it exits, and the
// container's stdout read from its CRI log file. containerd uses the modelfs proxy snapshotter
// configured as docs/install.md says (testsupport/harness/containerd_fixture.h); the registry's
// access log tells which client fetched what, by user agent.
//
// The containerd release comes from ../shared/tools (containerd_release.h):
// $MODELFS_CONTAINERD_RELEASE, which CTest sets per entry (integration/snapshotter/CMakeLists.txt:
// every test on 2.3.4, the cross-version set on 2.1.4 and 2.2.2). Without the release, or
// without root, FUSE or the daemon binary, the tests skip, except with CI=true, where they fail:
// CI must run them.
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "core/oci/digest.h"
#include "core/oci/tar.h"
#include "core/trust/keys.h"
#include "core/trust/sign.h"
#include "core/trust/signature_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration/snapshotter/snapshotter_daemon.h"
#include "nlohmann/json.hpp"
#include "testsupport/cri/cri_client.h"
#include "testsupport/harness/containerd_fixture.h"
#include "testsupport/harness/containerd_release.h"
#include "testsupport/harness/publish_test_env.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/synth/equivalent_models.h"
#include "testsupport/synth/synthetic_models.h"
#include "testsupport/testing/compress.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"
#include "testsupport/trust/test_keys.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kModelRepo[] = "e2e/llama";
constexpr char kBusyboxRepo[] = "e2e/busybox";
constexpr char kDockerRepo[] = "ai/tiny";          // a Docker model artifact
constexpr char kVolumesRepo[] = "e2e/volumes";     // `convert --to`: V apart from M
constexpr char kBusyboxBinary[] = "/bin/busybox";  // Debian package busybox-static
constexpr char kMountPath[] = "/models";
constexpr uint64_t kChunk = 1 << 20;  // `modelfs push` default chunk size

// One request in the registry's access log (Distribution's combined log format).
struct Request {
  std::string method;
  std::string path;
  int status = 0;
  uint64_t bytes = 0;
  std::string agent;
};

std::vector<Request> RequestsInAccessLog(const std::string& log, size_t offset) {
  std::vector<Request> out;
  static const std::regex re(
      "\"(GET|HEAD) (/v2/[^ ]*) HTTP/[0-9.]+\" ([0-9]{3}) ([0-9]+|-) \"[^\"]*\" \"([^\"]*)\"");
  std::string tail = log.substr(std::min(offset, log.size()));
  for (std::sregex_iterator it(tail.begin(), tail.end(), re), end; it != end; ++it) {
    const std::string bytes = (*it)[4].str();
    // Requests to a mirror carry the upstream as "?ns=host:port"; the path is what counts.
    std::string path = (*it)[2].str();
    path = path.substr(0, path.find('?'));
    out.push_back({(*it)[1].str(), path, std::stoi((*it)[3].str()),
                   bytes == "-" ? 0 : std::stoull(bytes), (*it)[5].str()});
  }
  return out;
}

// "containerd" or "modelfs" from a user agent ("containerd/v2.3.4", "modelfs/0.1").
std::string Client(const Request& r) {
  if (absl::StartsWith(r.agent, "containerd/")) return "containerd";
  if (absl::StartsWith(r.agent, "modelfs/")) return "modelfs";
  return r.agent;
}

// Blob GETs of `repo` by `client` ("containerd" or "modelfs"): digest -> {status -> bytes}.
std::map<std::string, std::map<int, uint64_t>> BlobBytes(const std::vector<Request>& requests,
                                                         const std::string& repo,
                                                         const std::string& client) {
  std::map<std::string, std::map<int, uint64_t>> out;
  const std::string prefix = absl::StrCat("/v2/", repo, "/blobs/");
  for (const Request& r : requests) {
    if (r.method != "GET" || !absl::StartsWith(r.path, prefix) || Client(r) != client) continue;
    out[r.path.substr(prefix.size())][r.status] += r.bytes;
  }
  return out;
}

// The blobs of `repo` that `client` fetched (any status).
std::set<std::string> BlobsFetchedBy(const std::vector<Request>& requests, const std::string& repo,
                                     const std::string& client) {
  std::set<std::string> out;
  for (const auto& [digest, by_status] : BlobBytes(requests, repo, client)) out.insert(digest);
  return out;
}

// A table of requests and response bytes per client and kind, printed for the record.
std::string DescribeTraffic(const std::vector<Request>& requests) {
  std::map<std::string, std::pair<int, uint64_t>> rows;
  for (const Request& r : requests) {
    std::string kind = absl::StrContains(r.path, "/blobs/")       ? "blob"
                       : absl::StrContains(r.path, "/manifests/") ? "manifest"
                                                                  : "other";
    auto& row = rows[absl::StrCat(Client(r), " ", r.method, " ", kind, " ", r.status)];
    ++row.first;
    row.second += r.bytes;
  }
  std::string out;
  for (const auto& [k, v] : rows)
    absl::StrAppend(&out, "  ", k, ": ", v.first, " requests, ", v.second, " bytes\n");
  return out;
}

// `sha256sum` output ("<hex>  ./path" per line) as DescribeFiles gives it.
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

// Every file under the mount, hashed inside the container.
constexpr char kHashEveryFile[] =
    "cd /models && find . -type f | sort | while read -r f; do sha256sum \"$f\"; done";

class ImageVolumeTest : public ::testing::Test {
 protected:
  // A missing component skips the test on a developer's machine and fails it in CI.
  void MissingComponent(const std::string& why) {
    if (RunningInCi()) {
      FAIL() << why << " (CI=true: this test must run in CI)";
    }
    GTEST_SKIP() << why;
  }

  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(release_, ContainerdReleaseUnderTest());
    std::cout << "[containerd] release " << release_.version << "\n";
    absl::StatusOr<std::string> release = ContainerdReleaseDir(release_);
    if (!release.ok() && release.status().code() == absl::StatusCode::kNotFound) {
      MissingComponent(std::string(release.status().message()));
      return;
    }
    ASSERT_OK(release.status());
    release_dir_ = *release;
    int config_version = release_.config_version;
    // A fixture may start the node on an older release than the one under test.
    if (!start_release_.empty() && start_release_ != release_.version) {
      ASSERT_OK_AND_ASSIGN(const ContainerdRelease older, FindContainerdRelease(start_release_));
      config_version = older.config_version;
      release = ContainerdReleaseDir(older);
      if (!release.ok() && release.status().code() == absl::StatusCode::kNotFound) {
        MissingComponent(std::string(release.status().message()));
        return;
      }
      ASSERT_OK(release.status());
    }
    for (const std::string& why :
         {Containerd::WhyUnavailable(*release), SnapshotterDaemon::WhyUnavailable(),
          std::string(access(kBusyboxBinary, X_OK) == 0
                          ? ""
                          : "no /bin/busybox (package busybox-static)")}) {
      if (!why.empty()) {
        MissingComponent(why);
        return;
      }
    }
    RegistryFixtureOptions ro;
    ro.access_log = true;
    ASSERT_OK_AND_ASSIGN(registry_, RegistryFixture::Start(ro));
    PushBusybox();
    ASSERT_FALSE(HasFatalFailure());
    SnapshotterDaemonOptions so;
    so.insecure_hosts = {registry_->host_port()};
    // Volume images converted into kVolumesRepo name their model in kModelRepo: the node allows
    // that repository (a volume image is followed only within its own by default).
    so.model_hosts = {absl::StrCat(registry_->host_port(), "/", kModelRepo)};
    // The daemon reads containerd's content store (image volumes naming M itself) on the
    // socket the fixture's containerd will listen on.
    const std::string containerd_socket = tmp_.Join("containerd.sock").string();
    so.containerd_address = containerd_socket;
    ConfigureDaemon(so);
    ASSERT_FALSE(HasFatalFailure());
    ASSERT_OK_AND_ASSIGN(daemon_, SnapshotterDaemon::Start(so));
    ContainerdOptions co;
    co.release_dir = *release;
    co.config_version = config_version;
    co.registry_host_port = registry_->host_port();
    co.proxy_snapshotter_name = "modelfs";
    co.proxy_snapshotter_address = daemon_->socket_path();
    co.cri = true;
    co.cri_snapshotter = "modelfs";
    co.sandbox_image = busybox_.reference;
    co.socket_path = containerd_socket;
    ASSERT_OK_AND_ASSIGN(containerd_, Containerd::Start(co));
    ASSERT_OK_AND_ASSIGN(images_, CriImageClient::Connect(containerd_->grpc_target()));
    ASSERT_OK_AND_ASSIGN(runtime_, CriRuntimeClient::Connect(containerd_->grpc_target()));
  }

  // For fixtures that configure the daemon further (a signature policy).
  virtual void ConfigureDaemon(SnapshotterDaemonOptions& so) {}

  void TearDown() override {
    DeletePods();
    if (!figures_.empty()) {
      std::cout << "[figures] case | PullImage | CreateContainer | StartContainer | reader run | "
                   "registry bytes by client\n";
      for (const std::string& line : figures_) std::cout << "[figures] " << line << "\n";
    }
    if (HasFailure() && daemon_ != nullptr) {
      std::cerr << "--- modelfs-snapshotter log (tail) ---\n" << Tail(daemon_->log_path(), 12000);
    }
    if (HasFailure() && containerd_ != nullptr) {
      std::cerr << "--- containerd log (tail) ---\n" << Tail(containerd_->log_path(), 12000);
    }
  }

  static std::string Tail(const std::string& path, size_t n) {
    std::string s = ReadFileOrDie(path);
    return s.substr(s.size() > n ? s.size() - n : 0) + "\n";
  }

  std::string Ref(const std::string& repo, const std::string& tag) const {
    return absl::StrCat(registry_->host_port(), "/", repo, ":", tag);
  }

  // A single-layer image of Debian's static busybox and the applets the tests run, as links
  // to it. It serves as the pause image (its Cmd sleeps) and as the reader.
  void PushBusybox() {
    std::vector<LayerFile> files = {{"bin/busybox", ReadFileOrDie(kBusyboxBinary), 0755, ""}};
    for (const char* applet : {"sh", "cat", "sha256sum", "sleep", "find", "sort", "head", "dd",
                               "ls", "wc", "echo", "true", "readlink"}) {
      files.push_back({absl::StrCat("bin/", applet), "", 0777, "busybox"});
    }
    ASSERT_OK_AND_ASSIGN(busybox_, PushOrdinaryImage(registry_->host_port(), kBusyboxRepo, "1.35",
                                                     {files}, {"/bin/sleep", "86400"}));
  }

  // `modelfs push` of the test model: M at tag v1, V at v1-volume (with `tar`, every file in
  // a .tar layer, at tag v1-tar and v1-tar-volume; with `zstd`, every file in a .tar+zstd
  // layer of independent frames, `push --compress zstd`, at v1-zstd and v1-zstd-volume).
  // With `path_prefix` (`push --path-prefix`, KServe's layout): M at tag kserve, V at
  // kserve-volume, showing M's files under that directory.
  void PushModel(bool tar = false, bool zstd = false, const std::string& path_prefix = "") {
    source_ = tmp_.Join("model").string();
    ASSERT_OK_AND_ASSIGN(std::vector<std::string> written, WriteTestModel(source_, /*seed=*/43));
    const std::string tag = !path_prefix.empty() ? "kserve"
                            : zstd               ? "v1-zstd"
                            : tar                ? "v1-tar"
                                                 : "v1";
    std::vector<std::string> args = {"push", "--plain-http", Ref(kModelRepo, tag), source_,
                                     "--json"};
    if (tar && !zstd) args.push_back("--tar");
    if (zstd) args.insert(args.end(), {"--compress", "zstd"});
    if (!path_prefix.empty()) args.insert(args.end(), {"--path-prefix", path_prefix});
    ASSERT_OK_AND_ASSIGN(ProcessResult push, RunModelfs(args));
    ASSERT_EQ(push.exit_code, 0) << push.err;
    push_ = ParseJsonOutput(push.out);
    ASSERT_TRUE(push_.is_object()) << push.out;
  }

  std::string BlobDigest(const std::string& role) const {
    for (const auto& b : push_["blobs"]) {
      if (b["role"] == role) return b["digest"];
    }
    return "";
  }

  // The weight files' layers (safetensors shards and the GGUF): digest -> (file, size).
  std::map<std::string, std::pair<std::string, uint64_t>> WeightBlobs() const {
    std::map<std::string, std::pair<std::string, uint64_t>> out;
    for (const auto& b : push_["blobs"]) {
      std::string role = b["role"];
      if (absl::EndsWith(role, ".safetensors") || absl::EndsWith(role, ".gguf")) {
        out[b["digest"].get<std::string>()] = {role, b["size"].get<uint64_t>()};
      }
    }
    return out;
  }

  size_t LogOffset() const { return ReadFileOrDie(registry_->log_path()).size(); }
  std::vector<Request> RequestsSince(size_t offset) const {
    return RequestsInAccessLog(ReadFileOrDie(registry_->log_path()), offset);
  }

  struct Pod {
    CriPodSpec spec;
    std::string sandbox_id;
    std::string volume_image_ref;  // PullImage's image_ref for V
    std::string reader_image_ref;  // and for the reader (busybox)
  };

  // What the kubelet would wait for, per pod: CRI call durations.
  struct Timings {
    absl::Duration pull;    // PullImage of the volume's image
    absl::Duration create;  // CreateContainer (the image volume is prepared here)
    absl::Duration start;   // StartContainer
    absl::Duration run;     // until the reader exited
  };

  // One line of the figures table (printed at the end of the test): the pod's CRI timings and
  // the registry bytes each client received for the model (manifests and blobs of every
  // repository but the reader image's) while it ran.
  void RecordFigures(const std::string& what, const std::string& pod,
                     const std::vector<Request>& requests) {
    std::map<std::string, std::pair<int, uint64_t>> by_client;
    for (const Request& r : requests) {
      // The model's repositories only: not the reader image.
      if (absl::StartsWith(r.path, absl::StrCat("/v2/", kBusyboxRepo, "/"))) continue;
      auto& c = by_client[Client(r)];
      ++c.first;
      c.second += r.bytes;
    }
    std::string clients;
    for (const char* c : {"containerd", "modelfs"}) {
      absl::StrAppend(&clients, clients.empty() ? "" : ", ", c, " ", by_client[c].second, " B in ",
                      by_client[c].first, " requests");
    }
    const Timings& t = timings_[pod];
    auto ms = [](absl::Duration d) { return absl::StrCat(absl::ToInt64Milliseconds(d), " ms"); };
    figures_.push_back(absl::StrCat(what, " | ", ms(t.pull), " | ", ms(t.create), " | ",
                                    ms(t.start), " | ", ms(t.run), " | ", clients));
  }

  // RunPodSandbox, then PullImage of V and of the reader, as the kubelet does for a pod whose
  // container mounts an image volume. Times each call.
  Pod StartPodAndPullVolume(const std::string& name, const std::string& volume_ref) {
    Pod pod;
    pod.spec.name = name;
    pod.spec.uid = name + "-uid";
    pod.spec.log_directory = tmp_.Join("pods/" + name).string();
    fs::create_directories(pod.spec.log_directory);
    absl::Time t0 = absl::Now();
    absl::StatusOr<std::string> sandbox = runtime_->RunPodSandbox(pod.spec);
    EXPECT_OK(sandbox.status());
    if (!sandbox.ok()) return pod;
    pod.sandbox_id = *sandbox;
    sandboxes_.push_back(*sandbox);
    absl::Time t1 = absl::Now();
    absl::StatusOr<std::string> volume = images_->PullImageForPod(volume_ref, pod.spec);
    EXPECT_OK(volume.status());
    if (!volume.ok()) return pod;
    pod.volume_image_ref = *volume;
    absl::Time t2 = absl::Now();
    timings_[name].pull = t2 - t1;
    if (!pull_reader_) {
      // As a kubelet with pullPolicy IfNotPresent: the reader is on the node already.
      pod.reader_image_ref = busybox_.reference;
      return pod;
    }
    absl::StatusOr<std::string> reader = images_->PullImageForPod(busybox_.reference, pod.spec);
    EXPECT_OK(reader.status());
    if (reader.ok()) pod.reader_image_ref = *reader;
    std::cout << "[cri] " << name << ": RunPodSandbox " << absl::FormatDuration(t1 - t0)
              << ", PullImage(V) " << absl::FormatDuration(t2 - t1) << ", PullImage(reader) "
              << absl::FormatDuration(absl::Now() - t2) << "\n";
    return pod;
  }

  // CreateContainer (the reader, with V mounted read-only at /models), StartContainer, wait for
  // it to exit; returns its stdout, and its exit code in `exit_code`.
  std::string RunReader(const Pod& pod, const std::string& script, int* exit_code,
                        const std::string& name = "reader") {
    *exit_code = -1;
    CriContainerSpec c;
    c.name = name;
    // The kubelet names the image by the image_ref PullImage returned.
    c.image = pod.reader_image_ref;
    c.command = {"/bin/sh", "-c", script};
    c.mounts = {{kMountPath, "", pod.volume_image_ref, true, image_sub_path_}};
    c.log_path = name + ".log";
    absl::Time t0 = absl::Now();
    absl::StatusOr<std::string> id = runtime_->CreateContainer(pod.sandbox_id, c, pod.spec);
    EXPECT_OK(id.status());
    if (!id.ok()) return "";
    containers_.push_back(*id);
    absl::Time t1 = absl::Now();
    absl::Status started = runtime_->StartContainer(*id);
    EXPECT_OK(started);
    if (!started.ok()) return "";
    absl::Time t2 = absl::Now();
    absl::StatusOr<CriContainerStatus> st = runtime_->WaitForExit(*id, absl::Minutes(3));
    EXPECT_OK(st.status());
    if (!st.ok()) return "";
    Timings& timings = timings_[pod.spec.name];
    timings.create = t1 - t0;
    timings.start = t2 - t1;
    timings.run = absl::Now() - t2;
    std::cout << "[cri] " << pod.spec.name << ": CreateContainer " << absl::FormatDuration(t1 - t0)
              << ", StartContainer " << absl::FormatDuration(t2 - t1) << ", run until exit "
              << absl::FormatDuration(absl::Now() - t2) << "\n";
    *exit_code = st->exit_code;
    const std::string log = ReadFileOrDie(pod.spec.log_directory + "/" + name + ".log");
    if (st->exit_code != 0) std::cerr << "reader log:\n" << log << "\n";
    return ParseCriLog(log);
  }

  // StopContainer, RemoveContainer, StopPodSandbox, RemovePodSandbox for the pods started so far,
  // as the kubelet deletes a pod.
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

  // Runs kHashEveryFile in a new pod on `volume_ref` and checks every model file's digest
  // against the source; returns the access-log offset taken before the pod started.
  size_t RunPodThatHashesEveryFile(const std::string& name, const std::string& volume_ref,
                                   const std::string& image_config_role = "volume config") {
    return RunPodThatHashes(name, volume_ref, BlobDigest(image_config_role),
                            DescribeFiles(source_));
  }

  // The same for any image whose PullImage answers `image_id` (its config digest) and whose
  // volume must hold exactly `want` (path -> digest) besides .modelinfo.json.
  size_t RunPodThatHashes(const std::string& name, const std::string& volume_ref,
                          const std::string& image_id,
                          const std::map<std::string, std::string>& want) {
    const size_t offset = LogOffset();
    Pod pod = StartPodAndPullVolume(name, volume_ref);
    if (pod.volume_image_ref.empty()) return offset;
    EXPECT_EQ(pod.volume_image_ref, image_id);
    int exit_code = -1;
    std::map<std::string, std::string> seen =
        ParseSha256sum(RunReader(pod, kHashEveryFile, &exit_code));
    EXPECT_EQ(exit_code, 0);
    EXPECT_EQ(seen.erase(".modelinfo.json"), 1u) << "no .modelinfo.json in the volume";
    EXPECT_EQ(seen, want);
    return offset;
  }

  // A Docker model artifact (`docker model package` layout, Docker's exact media types: config
  // v0.1, a GGUF, a license, a chat template, a directory tar) at kDockerRepo:v1, built by hand
  // from the test model's files. Returns the files its volume must show, and sets
  // docker_config_ to its config's digest.
  std::map<std::string, std::string> PushDockerArtifact() {
    const std::string src = tmp_.Join("docker-src").string();
    EXPECT_OK(WriteTestModel(src, /*seed=*/61).status());
    std::map<std::string, std::string> files = {
        {"model.gguf", ReadFileOrDie(src + "/tiny.gguf")},
        {"LICENSE", "Apache License 2.0, for the test\n"},
        {"template.jinja", "{% for m in messages %}{{ m.content }}{% endfor %}\n"},
        {"tokenizer.json", ReadFileOrDie(src + "/tokenizer.json")},
        {"config.json", ReadFileOrDie(src + "/config.json")}};
    absl::StatusOr<std::unique_ptr<RegistryClient>> client =
        ConnectPlainHttp(registry_->host_port());
    EXPECT_OK(client.status());
    if (!client.ok()) return {};
    TarWriter dir_tar;
    EXPECT_OK(dir_tar.AddFile("tokenizer.json", files["tokenizer.json"]));
    EXPECT_OK(dir_tar.AddFile("config.json", files["config.json"]));
    const std::vector<std::pair<std::string, std::string>> layers = {
        {"application/vnd.docker.ai.gguf.v3", files["model.gguf"]},
        {"application/vnd.docker.ai.license", files["LICENSE"]},
        {"application/vnd.docker.ai.chat.template.jinja", files["template.jinja"]},
        {"application/vnd.docker.ai.dir.tar", dir_tar.Finish()},
    };
    nlohmann::json descs = nlohmann::json::array();
    nlohmann::json diff_ids = nlohmann::json::array();
    for (const auto& [media_type, bytes] : layers) {
      absl::StatusOr<Digest> d = UploadBlob(**client, kDockerRepo, bytes);
      EXPECT_OK(d.status());
      if (!d.ok()) return {};
      descs.push_back({{"mediaType", media_type}, {"digest", d->str()}, {"size", bytes.size()}});
      diff_ids.push_back({{"diffID", d->str()}, {"type", media_type}});
    }
    const std::string config =
        nlohmann::json({{"config", {{"format", "gguf"}, {"size", "1.2MB"}}}, {"files", diff_ids}})
            .dump();
    absl::StatusOr<Digest> cd = UploadBlob(**client, kDockerRepo, config);
    EXPECT_OK(cd.status());
    if (!cd.ok()) return {};
    docker_config_ = cd->str();
    nlohmann::json manifest = {{"schemaVersion", 2},
                               {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                               {"config",
                                {{"mediaType", "application/vnd.docker.ai.model.config.v0.1+json"},
                                 {"digest", cd->str()},
                                 {"size", config.size()}}},
                               {"layers", descs}};
    EXPECT_OK((*client)
                  ->PutManifest(kDockerRepo, "v1", manifest.dump(),
                                "application/vnd.oci.image.manifest.v1+json")
                  .status());
    std::map<std::string, std::string> want;
    for (const auto& [path, bytes] : files) want[path] = Digest::Of(bytes).str();
    return want;
  }

  // `modelfs convert` of `ref` (optionally --to another repository); its --json output.
  nlohmann::json Convert(const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"convert", "--plain-http", "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    absl::StatusOr<ProcessResult> r = RunModelfs(args);
    EXPECT_OK(r.status());
    if (!r.ok()) return nullptr;
    EXPECT_EQ(r->exit_code, 0) << r->err;
    return ParseJsonOutput(r->out);
  }

  static std::string RoleDigest(const nlohmann::json& result, const std::string& role) {
    if (!result.is_object() || !result.contains("blobs")) return "";
    for (const auto& b : result["blobs"]) {
      if (b["role"] == role) return b["digest"];
    }
    return "";
  }

  // Per blob of the model's repository: which client fetched it, with which status, how many
  // bytes, named by its role in `modelfs push` (for the record).
  std::string DescribeModelBlobs(const std::vector<Request>& requests) const {
    std::map<std::string, std::string> roles;
    for (const auto& b : push_["blobs"]) roles[b["digest"]] = b["role"];
    std::string out;
    for (const char* client : {"containerd", "modelfs"}) {
      for (const auto& [digest, by_status] : BlobBytes(requests, kModelRepo, client)) {
        for (const auto& [status, bytes] : by_status) {
          absl::StrAppend(&out, "  ", client, " ", roles[digest], " ", status, ": ", bytes,
                          " bytes\n");
        }
      }
    }
    return out;
  }

  // containerd fetched V's config and nothing else of the model's repository (not V's layer,
  // not M); modelfs fetched every weight file by range only, each byte once.
  void ExpectLazyTraffic(const std::vector<Request>& requests) {
    std::cout << "[registry] traffic of the pod:\n"
              << DescribeTraffic(requests) << "[registry] blobs of the model's repository:\n"
              << DescribeModelBlobs(requests);
    auto containerd = BlobBytes(requests, kModelRepo, "containerd");
    std::set<std::string> containerd_blobs;
    for (const auto& [digest, by_status] : containerd) containerd_blobs.insert(digest);
    EXPECT_EQ(containerd_blobs, std::set<std::string>{BlobDigest("volume config")});
    auto modelfs = BlobBytes(requests, kModelRepo, "modelfs");
    for (const auto& [digest, file] : WeightBlobs()) {
      std::map<int, uint64_t> want = {{206, file.second}};
      EXPECT_EQ(modelfs[digest], want) << file.first << " (" << digest << ")";
    }
  }

  TempDir tmp_;
  ContainerdRelease release_;  // the release under test
  std::string release_dir_;    // its extracted directory
  std::string start_release_;  // set by a fixture: the release the node starts on instead
  std::unique_ptr<RegistryFixture> registry_;
  std::unique_ptr<SnapshotterDaemon> daemon_;
  std::unique_ptr<Containerd> containerd_;  // destroyed before the daemon
  std::unique_ptr<CriImageClient> images_;
  std::unique_ptr<CriRuntimeClient> runtime_;
  std::vector<std::string> sandboxes_;
  std::vector<std::string> containers_;
  std::map<std::string, Timings> timings_;  // by pod name
  std::vector<std::string> figures_;
  std::string docker_config_;
  bool pull_reader_ = true;     // PullImage of the reader in every pod (false: it is present)
  std::string image_sub_path_;  // the volume's subPath in RunReader's container ("": none)
  PushedImage busybox_;
  std::string source_;
  nlohmann::json push_;
};

TEST_F(ImageVolumeTest, PodWithTheVolumeImageByTagReadsEveryModelFileExactly) {
  PushModel();
  ASSERT_FALSE(HasFatalFailure());
  const size_t offset = RunPodThatHashesEveryFile("by-tag", Ref(kModelRepo, "v1-volume"));
  ASSERT_FALSE(HasFailure());
  ExpectLazyTraffic(RequestsSince(offset));
  RecordFigures("V by tag", "by-tag", RequestsSince(offset));
}

// A model published with `push --compress zstd` (.tar+zstd layers): the pod reads every file
// exactly, and containerd fetches nothing of the model but V's config.
TEST_F(ImageVolumeTest, PodWithTheVolumeImageOfACompressedModelReadsEveryFileExactly) {
  PushModel(/*tar=*/true, /*zstd=*/true);
  ASSERT_FALSE(HasFatalFailure());
  const size_t offset = RunPodThatHashesEveryFile("zstd", Ref(kModelRepo, "v1-zstd-volume"));
  ASSERT_FALSE(HasFailure());
  const std::vector<Request> requests = RequestsSince(offset);
  std::cout << "[registry] traffic of the pod:\n" << DescribeTraffic(requests);
  EXPECT_EQ(BlobsFetchedBy(requests, kModelRepo, "containerd"),
            std::set<std::string>{BlobDigest("volume config")});
  RecordFigures("V of a .tar+zstd M", "zstd", requests);
}

// The other compressed encodings (issue 28): M's tar layers recompressed with gzip (served
// lazily through the seek index `modelfs convert` writes into V) and as one zstd frame each
// (no seek index can enter it: each layer is fetched whole, decoded as it streams in and
// checked before the pod reads a byte). The pod reads every file exactly, containerd fetches
// nothing of the model but V's config, and modelfs fetches each compressed layer at most once.
class CompressedVolumeTest : public ImageVolumeTest,
                             public ::testing::WithParamInterface<std::string> {
 protected:
  // M's .tar layers at v1-tar, recompressed (`gzip` or `zstd-frame`) at v1-<encoding>;
  // returns the compressed layers' digests and sizes.
  std::map<std::string, uint64_t> PushRecompressedModel(const std::string& encoding) {
    PushModel(/*tar=*/true);
    std::map<std::string, uint64_t> compressed;
    if (HasFatalFailure()) return compressed;
    absl::StatusOr<std::unique_ptr<RegistryClient>> client =
        ConnectPlainHttp(registry_->host_port());
    EXPECT_OK(client.status());
    if (!client.ok()) return compressed;
    absl::StatusOr<ManifestResult> m = (*client)->GetManifest(kModelRepo, "v1-tar");
    EXPECT_OK(m.status());
    if (!m.ok()) return compressed;
    nlohmann::json manifest = nlohmann::json::parse(m->bytes);
    for (auto& layer : manifest["layers"]) {
      const std::string media_type = layer["mediaType"];
      if (!absl::EndsWith(media_type, ".tar")) continue;
      absl::StatusOr<std::string> tar =
          FetchBlob(**client, kModelRepo, layer["digest"].get<std::string>());
      EXPECT_OK(tar.status());
      if (!tar.ok()) return compressed;
      const std::string bytes = encoding == "gzip" ? Gzip(*tar) : ZstdFrames(*tar, tar->size() + 1);
      absl::StatusOr<Digest> d = UploadBlob(**client, kModelRepo, bytes);
      EXPECT_OK(d.status());
      if (!d.ok()) return compressed;
      layer["mediaType"] = media_type + (encoding == "gzip" ? "+gzip" : "+zstd");
      layer["digest"] = d->str();
      layer["size"] = bytes.size();
      compressed[d->str()] = bytes.size();
    }
    EXPECT_OK((*client)
                  ->PutManifest(kModelRepo, "v1-" + encoding, manifest.dump(), m->media_type)
                  .status());
    return compressed;
  }
};

TEST_P(CompressedVolumeTest, PodWithTheVolumeImageOfARecompressedModelReadsEveryFileExactly) {
  const std::string encoding = GetParam();
  const std::map<std::string, uint64_t> compressed = PushRecompressedModel(encoding);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_FALSE(compressed.empty());
  const nlohmann::json converted = Convert({Ref(kModelRepo, "v1-" + encoding)});
  ASSERT_TRUE(converted.is_object()) << converted;
  const size_t offset =
      RunPodThatHashes(encoding, Ref(kModelRepo, "v1-" + encoding + "-volume"),
                       RoleDigest(converted, "volume config"), DescribeFiles(source_));
  ASSERT_FALSE(HasFailure());
  const std::vector<Request> requests = RequestsSince(offset);
  std::cout << "[registry] traffic of the pod:\n" << DescribeTraffic(requests);
  EXPECT_EQ(BlobsFetchedBy(requests, kModelRepo, "containerd"),
            std::set<std::string>{RoleDigest(converted, "volume config")});
  for (const auto& [digest, by_status] : BlobBytes(requests, kModelRepo, "modelfs")) {
    if (!compressed.contains(digest)) continue;
    uint64_t bytes = 0;
    for (const auto& [status, n] : by_status) bytes += n;
    EXPECT_LE(bytes, compressed.at(digest)) << digest << " fetched more than once";
  }
  RecordFigures(absl::StrCat("V of a recompressed M (", encoding, ")"), encoding, requests);
}

INSTANTIATE_TEST_SUITE_P(GzipAndOneZstdFrame, CompressedVolumeTest,
                         ::testing::Values("gzip", "zstd-frame"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return p.param == "gzip" ? std::string("Gzip")
                                                    : std::string("OneZstdFrame");
                         });

TEST_F(ImageVolumeTest, PodWithTheVolumeImageByDigestReadsEveryModelFileExactly) {
  PushModel();
  ASSERT_FALSE(HasFatalFailure());
  const std::string by_digest = absl::StrCat(registry_->host_port(), "/", kModelRepo, "@",
                                             push_["volume"]["digest"].get<std::string>());
  const size_t offset = RunPodThatHashesEveryFile("by-digest", by_digest);
  ASSERT_FALSE(HasFailure());
  ExpectLazyTraffic(RequestsSince(offset));
  RecordFigures("V by digest", "by-digest", RequestsSince(offset));
}

// A second pod on a model another pod has read: the weights come from modelfs's verified
// cache, and containerd already holds V, so neither client fetches a blob of the model again.
TEST_F(ImageVolumeTest, SecondPodOnTheSameModelFetchesNoBlobAgain) {
  PushModel();
  ASSERT_FALSE(HasFatalFailure());
  RunPodThatHashesEveryFile("first", Ref(kModelRepo, "v1-volume"));
  ASSERT_FALSE(HasFailure());
  const size_t offset = RunPodThatHashesEveryFile("second", Ref(kModelRepo, "v1-volume"));
  ASSERT_FALSE(HasFailure());
  const std::vector<Request> requests = RequestsSince(offset);
  std::cout << "[registry] traffic of the second pod:\n" << DescribeTraffic(requests);
  RecordFigures("V, second pod on a cached model", "second", requests);
  EXPECT_TRUE(BlobBytes(requests, kModelRepo, "modelfs").empty());
  EXPECT_TRUE(BlobBytes(requests, kModelRepo, "containerd").empty());
}

// A cold pod that reads 4 KiB from the middle of one shard: while the container runs, modelfs
// fetches the one chunk holding those bytes and nothing else.
TEST_F(ImageVolumeTest, ColdPodReadingASliceFetchesOnlyTheChunkHoldingIt) {
  PushModel();
  ASSERT_FALSE(HasFatalFailure());
  std::string shard_digest, shard_file;
  for (const auto& [digest, file] : WeightBlobs()) {
    if (absl::EndsWith(file.first, ".safetensors") && file.second >= 3 * kChunk) {
      shard_digest = digest;
      shard_file = file.first;
      break;
    }
  }
  ASSERT_FALSE(shard_file.empty()) << "the test model has no shard of 3 MiB or more";
  constexpr uint64_t kOffset = 2 * kChunk + kChunk / 2;
  constexpr uint64_t kLength = 4096;
  const std::string want =
      Digest::Of(ReadFileOrDie(source_ + "/" + shard_file).substr(kOffset, kLength)).str();

  Pod pod = StartPodAndPullVolume("slice", Ref(kModelRepo, "v1-volume"));
  ASSERT_FALSE(pod.volume_image_ref.empty());
  const size_t offset = LogOffset();
  int exit_code = -1;
  const std::string out =
      RunReader(pod,
                absl::StrCat("dd if=/models/", shard_file, " bs=", kLength,
                             " skip=", kOffset / kLength, " count=1 2>/dev/null | sha256sum"),
                &exit_code);
  EXPECT_EQ(exit_code, 0);
  EXPECT_EQ(out, absl::StrCat(want.substr(7), "  -\n"));
  const std::vector<Request> requests = RequestsSince(offset);
  std::cout << "[registry] traffic while the slice was read:\n"
            << DescribeTraffic(requests) << DescribeModelBlobs(requests);
  std::map<std::string, std::map<int, uint64_t>> expected = {{shard_digest, {{206, kChunk}}}};
  EXPECT_EQ(BlobBytes(requests, kModelRepo, "modelfs"), expected);
  EXPECT_TRUE(BlobBytes(requests, kModelRepo, "containerd").empty());
}

// Deleting the pod unmounts everything containerd mounted for it (the image volume's overlay
// on the model, the sandbox's and the container's root filesystems); modelfs's own FUSE mount
// stays for the next pod.
TEST_F(ImageVolumeTest, DeletingThePodLeavesNothingMountedUnderContainerd) {
  PushModel();
  ASSERT_FALSE(HasFatalFailure());
  Pod pod = StartPodAndPullVolume("delete-me", Ref(kModelRepo, "v1-volume"));
  ASSERT_FALSE(pod.volume_image_ref.empty());
  int exit_code = -1;
  EXPECT_EQ(RunReader(pod, "cat /models/config.json", &exit_code),
            ReadFileOrDie(source_ + "/config.json"));
  EXPECT_EQ(exit_code, 0);
  ASSERT_FALSE(MountsUnder(containerd_->dir()).empty()) << "the pod mounted nothing?";
  DeletePods();
  EXPECT_EQ(MountsUnder(containerd_->dir()), std::vector<std::string>{});
  EXPECT_EQ(MountsUnder(daemon_->root()), std::vector<std::string>{daemon_->root() + "/mnt"});
}

// PullImage of V registers the model and fetches manifests and small configs only: no byte of a
// weight file. A container that reads config.json fetches that file and still no weight bytes;
// the first lookup of .modelinfo.json is what reads the weight files' headers (a few chunks of
// each, never the whole file).
TEST_F(ImageVolumeTest, PullImageFetchesNoWeightBytesUntilModelinfoIsLookedUp) {
  PushModel();
  ASSERT_FALSE(HasFatalFailure());
  const auto weights = WeightBlobs();
  ASSERT_FALSE(weights.empty());
  const size_t before_pull = LogOffset();
  Pod pod = StartPodAndPullVolume("lazy-info", Ref(kModelRepo, "v1-volume"));
  ASSERT_FALSE(pod.volume_image_ref.empty());
  const std::vector<Request> pull = RequestsSince(before_pull);
  std::cout << "[registry] traffic of RunPodSandbox and PullImage:\n"
            << DescribeTraffic(pull) << DescribeModelBlobs(pull);
  std::set<std::string> pulled;
  for (const char* client : {"containerd", "modelfs"}) {
    for (const auto& [digest, by_status] : BlobBytes(pull, kModelRepo, client)) {
      pulled.insert(digest);
    }
  }
  EXPECT_EQ(pulled, (std::set<std::string>{BlobDigest("volume config"), BlobDigest("volume layer"),
                                           BlobDigest("config")}));

  const size_t before_config = LogOffset();
  int exit_code = -1;
  EXPECT_EQ(RunReader(pod, "cat /models/config.json", &exit_code, "config-reader"),
            ReadFileOrDie(source_ + "/config.json"));
  EXPECT_EQ(exit_code, 0);
  const std::vector<Request> config_read = RequestsSince(before_config);
  std::cout << "[registry] traffic while config.json was read:\n"
            << DescribeModelBlobs(config_read);
  auto modelfs = BlobBytes(config_read, kModelRepo, "modelfs");
  for (const auto& [digest, file] : weights) {
    EXPECT_EQ(modelfs.count(digest), 0u) << file.first << " fetched before .modelinfo.json";
  }

  const size_t before_info = LogOffset();
  const std::string info_text =
      RunReader(pod, "cat /models/.modelinfo.json", &exit_code, "info-reader");
  EXPECT_EQ(exit_code, 0);
  nlohmann::json info = nlohmann::json::parse(info_text, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(info.is_object()) << info_text;
  EXPECT_EQ(info["schemaVersion"], 1);
  const std::vector<Request> info_read = RequestsSince(before_info);
  std::cout << "[registry] traffic while .modelinfo.json was read:\n"
            << DescribeModelBlobs(info_read);
  modelfs = BlobBytes(info_read, kModelRepo, "modelfs");
  for (const auto& [digest, file] : weights) {
    ASSERT_EQ(modelfs.count(digest), 1u) << file.first << " header not read for .modelinfo.json";
    const std::map<int, uint64_t>& by_status = modelfs[digest];
    ASSERT_EQ(by_status.size(), 1u) << file.first;
    EXPECT_EQ(by_status.begin()->first, 206) << file.first;
    EXPECT_GT(by_status.begin()->second, 0u) << file.first;
    EXPECT_LT(by_status.begin()->second, file.second) << file.first << " fetched whole";
  }
  RecordFigures("V by tag, PullImage + reader of config.json", "lazy-info", pull);
}

// `modelfs convert SRC --to DST`: V lives in another repository than M. containerd fetches V's
// config from DST and nothing of SRC; modelfs reads M's weights from SRC by range, each byte
// once.
TEST_F(ImageVolumeTest, PodWithAVolumeImageConvertedIntoAnotherRepository) {
  PushModel();
  ASSERT_FALSE(HasFatalFailure());
  const nlohmann::json converted =
      Convert({Ref(kModelRepo, "v1"), "--to", Ref(kVolumesRepo, "llama")});
  ASSERT_TRUE(converted.is_object()) << converted;
  const std::string v_ref = absl::StrCat(registry_->host_port(), "/", kVolumesRepo, "@",
                                         converted["volume"]["digest"].get<std::string>());
  const size_t offset = RunPodThatHashes("converted", v_ref, RoleDigest(converted, "volume config"),
                                         DescribeFiles(source_));
  ASSERT_FALSE(HasFailure());
  const std::vector<Request> requests = RequestsSince(offset);
  std::cout << "[registry] traffic of the pod:\n"
            << DescribeTraffic(requests) << DescribeModelBlobs(requests);
  EXPECT_TRUE(BlobBytes(requests, kModelRepo, "containerd").empty());
  std::set<std::string> containerd_dst;
  for (const auto& [digest, by_status] : BlobBytes(requests, kVolumesRepo, "containerd")) {
    containerd_dst.insert(digest);
  }
  EXPECT_EQ(containerd_dst, std::set<std::string>{RoleDigest(converted, "volume config")});
  auto modelfs = BlobBytes(requests, kModelRepo, "modelfs");
  for (const auto& [digest, file] : WeightBlobs()) {
    std::map<int, uint64_t> want = {{206, file.second}};
    EXPECT_EQ(modelfs[digest], want) << file.first << " (" << digest << ")";
  }
  RecordFigures("V converted into another repo (by digest)", "converted", requests);
}

// A Docker model artifact (`docker model package` layout) named directly by the image volume:
// containerd downloads it whole and modelfs serves it from containerd's content store, with
// the files where Docker's tools lay them out.
TEST_F(ImageVolumeTest, PodWithADockerModelArtifactNamedDirectly) {
  const std::map<std::string, std::string> want = PushDockerArtifact();
  ASSERT_FALSE(HasFailure());
  const size_t offset = RunPodThatHashes(
      "docker-plain", absl::StrCat(registry_->host_port(), "/", kDockerRepo, ":v1"), docker_config_,
      want);
  ASSERT_FALSE(HasFailure());
  const std::vector<Request> requests = RequestsSince(offset);
  std::cout << "[registry] traffic of the pod:\n" << DescribeTraffic(requests);
  EXPECT_TRUE(BlobBytes(requests, kDockerRepo, "modelfs").empty());
  EXPECT_EQ(BlobBytes(requests, kDockerRepo, "containerd").size(), 5u);  // config + 4 layers
  RecordFigures("Docker-format artifact, named directly (eager)", "docker-plain", requests);
}

// The same Docker artifact through the volume image `modelfs convert` writes for it: lazy,
// containerd fetches only V's config.
TEST_F(ImageVolumeTest, PodWithTheVolumeImageOfADockerModelArtifact) {
  const std::map<std::string, std::string> want = PushDockerArtifact();
  ASSERT_FALSE(HasFailure());
  const nlohmann::json converted =
      Convert({absl::StrCat(registry_->host_port(), "/", kDockerRepo, ":v1")});
  ASSERT_TRUE(converted.is_object()) << converted;
  const size_t offset = RunPodThatHashes(
      "docker-volume", absl::StrCat(registry_->host_port(), "/", kDockerRepo, ":v1-volume"),
      RoleDigest(converted, "volume config"), want);
  ASSERT_FALSE(HasFailure());
  const std::vector<Request> requests = RequestsSince(offset);
  std::cout << "[registry] traffic of the pod:\n" << DescribeTraffic(requests);
  EXPECT_EQ(BlobsFetchedBy(requests, kDockerRepo, "containerd"),
            std::set<std::string>{RoleDigest(converted, "volume config")});
  RecordFigures("Docker-format artifact, through its V (lazy)", "docker-volume", requests);
}

// A model read through a pull-through cache (Distribution with proxy.remoteurl) while the
// origin is down: containerd and modelfs both follow hosts.toml to the mirror (the same
// certs.d layout, one file each). The mirror is warmed by a `modelfs pull` through it, then
// the origin stops; a pod on a cold node (nothing cached by containerd or modelfs) reads every
// byte through the mirror.
TEST_F(ImageVolumeTest, PodReadsAModelThroughAMirrorWhileTheOriginIsDown) {
  PushModel();
  ASSERT_FALSE(HasFatalFailure());
  RegistryFixtureOptions mo;
  mo.access_log = true;
  mo.proxy_remote_url = absl::StrCat("http://", registry_->host_port());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RegistryFixture> mirror, RegistryFixture::Start(mo));
  const std::string hosts_toml =
      absl::StrCat("server = \"http://", registry_->host_port(), "\"\n[host.\"http://",
                   mirror->host_port(), "\"]\n  capabilities = [\"pull\", \"resolve\"]\n");
  const std::string warm_certs = tmp_.Join("warm-certs.d").string();
  for (const std::string& dir : {warm_certs, daemon_->hosts_dir(), containerd_->hosts_dir()}) {
    fs::create_directories(fs::path(dir) / registry_->host_port());
    std::ofstream(fs::path(dir) / registry_->host_port() / "hosts.toml") << hosts_toml;
  }
  ASSERT_OK_AND_ASSIGN(ProcessResult pull,
                       RunModelfs({"pull", "--plain-http", "--hosts-dir", warm_certs,
                                   Ref(kModelRepo, "v1-volume"), tmp_.Join("warm").string()}));
  ASSERT_EQ(pull.exit_code, 0) << pull.err;
  // `pull` needs no V config, containerd does: fetch every blob of V and M through the mirror.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RegistryClient> via_mirror,
                       ConnectPlainHttp(mirror->host_port()));
  for (const auto& b : push_["blobs"]) {
    ASSERT_OK(FetchBlob(*via_mirror, kModelRepo, b["digest"].get<std::string>()).status());
  }
  // Distribution stores what it proxied in the background: wait for every blob of V and M.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  for (const auto& b : push_["blobs"]) {
    ASSERT_OK_AND_ASSIGN(Digest d, Digest::Parse(b["digest"].get<std::string>()));
    while (!(fs::exists(mirror->BlobDataPath(d)) &&
             Digest::Of(ReadFileOrDie(mirror->BlobDataPath(d))) == d)) {
      ASSERT_LT(absl::Now(), deadline) << "the mirror never stored " << d.str();
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
  // The node has the pause and reader image (busybox), as a node that ran pods before.
  ASSERT_OK(images_->PullImage(busybox_.reference).status());
  registry_->Stop();
  pull_reader_ = false;  // the busybox image is on the node; the mirror never saw it

  const size_t mirror_offset = ReadFileOrDie(mirror->log_path()).size();
  RunPodThatHashesEveryFile("mirror", Ref(kModelRepo, "v1-volume"));
  ASSERT_FALSE(HasFailure());
  const std::vector<Request> requests =
      RequestsInAccessLog(ReadFileOrDie(mirror->log_path()), mirror_offset);
  std::cout << "[registry] traffic of the pod at the mirror (origin down):\n"
            << DescribeTraffic(requests) << DescribeModelBlobs(requests);
  ExpectLazyTraffic(requests);
  RecordFigures("V by tag through a mirror, origin down (mirror's bytes)", "mirror", requests);
}

// A model's state as a second image volume: `modelfs state push` writes a state S of M and a
// volume image VS for it; a pod mounts V at /models and VS at /state, and sees the state's
// file byte-identical and a .modelinfo.json naming the model it belongs to.
TEST_F(ImageVolumeTest, PodMountsAModelsStateAsASecondImageVolume) {
  PushModel();
  ASSERT_FALSE(HasFatalFailure());
  const std::string state_file = tmp_.Join("prompt.state").string();
  std::string state_bytes(3 << 20, '\0');
  for (size_t i = 0; i < state_bytes.size(); ++i) state_bytes[i] = static_cast<char>(i * 31 + 7);
  {
    std::ofstream out(state_file, std::ios::binary);
    out << state_bytes;
  }
  ASSERT_OK_AND_ASSIGN(
      ProcessResult state,
      RunModelfs({"state", "push", "--plain-http", "--json", Ref(kModelRepo, "v1-volume"),
                  state_file, "--name", "primed", "--format", "llama.cpp", "--tokens", "479"}));
  ASSERT_EQ(state.exit_code, 0) << state.err;
  const nlohmann::json pushed = ParseJsonOutput(state.out);
  Pod pod = StartPodAndPullVolume("state", Ref(kModelRepo, "v1-volume"));
  ASSERT_FALSE(pod.volume_image_ref.empty());
  ASSERT_OK_AND_ASSIGN(std::string state_image,
                       images_->PullImageForPod(pushed["volume"]["reference"], pod.spec));
  CriContainerSpec c;
  c.name = "reader";
  c.image = pod.reader_image_ref;
  c.command = {"/bin/sh", "-c",
               "sha256sum /models/config.json /state/prompt.state && cat /state/.modelinfo.json"};
  c.mounts = {{kMountPath, "", pod.volume_image_ref, true}, {"/state", "", state_image, true}};
  c.log_path = "reader.log";
  ASSERT_OK_AND_ASSIGN(std::string id, runtime_->CreateContainer(pod.sandbox_id, c, pod.spec));
  containers_.push_back(id);
  ASSERT_OK(runtime_->StartContainer(id));
  ASSERT_OK_AND_ASSIGN(CriContainerStatus st, runtime_->WaitForExit(id, absl::Minutes(3)));
  const std::string out = ParseCriLog(ReadFileOrDie(pod.spec.log_directory + "/reader.log"));
  ASSERT_EQ(st.exit_code, 0) << out;
  EXPECT_THAT(
      out, ::testing::HasSubstr(Digest::Of(state_bytes).str().substr(7) + "  /state/prompt.state"));
  EXPECT_THAT(out, ::testing::HasSubstr(DescribeFiles(source_)["config.json"].substr(7) +
                                        "  /models/config.json"));
  const size_t json_at = out.find('{');
  ASSERT_NE(json_at, std::string::npos) << out;
  nlohmann::json info = nlohmann::json::parse(out.substr(json_at), nullptr, false);
  ASSERT_FALSE(info.is_discarded()) << out;
  EXPECT_EQ(info["state"]["model"]["digest"], push_["model"]["digest"]);
  EXPECT_EQ(info["state"]["name"], "primed");
}

// 200 weight layers (issue 33, "many layers": shem splits a model into one layer per block,
// and overlayfs stops at about 128 layers): pushed, converted, and mounted in a pod as one
// image volume served from one FUSE mount; every file byte-identical. Prints the CRI timings
// and the daemon's RSS.
TEST_F(ImageVolumeTest, PodMountsAModelOfTwoHundredWeightLayers) {
  constexpr int kLayers = 200;
  source_ = tmp_.Join("blocks").string();
  fs::create_directories(source_ + "/blocks");
  for (int i = 0; i < kLayers; ++i) {
    TinyLlamaSpec spec;
    spec.layers = 1;
    spec.embedding = 64;
    spec.heads = 2;
    spec.kv_heads = 1;
    spec.ffn = 128;
    spec.vocab = 256;
    spec.context = 256;
    spec.seed = 1000 + i;
    ASSERT_OK(WriteTinyLlamaGguf(absl::StrFormat("%s/blocks/blk-%03d.gguf", source_, i), spec));
  }
  ASSERT_OK_AND_ASSIGN(ProcessResult push, RunModelfs({"push", "--plain-http", "--json",
                                                       Ref(kModelRepo, "blocks"), source_}));
  ASSERT_EQ(push.exit_code, 0) << push.err;
  push_ = ParseJsonOutput(push.out);
  int weight_layers = 0;
  for (const auto& b : push_["blobs"]) {
    if (b["mediaType"] == "application/vnd.cncf.model.weight.v1.raw") ++weight_layers;
  }
  ASSERT_EQ(weight_layers, kLayers);
  const std::string model = absl::StrCat(registry_->host_port(), "/", kModelRepo, "@",
                                         push_["model"]["digest"].get<std::string>());
  ASSERT_OK_AND_ASSIGN(
      ProcessResult convert,
      RunModelfs({"convert", "--plain-http", "--json", model, "--volume-tag", "blocks-converted"}));
  ASSERT_EQ(convert.exit_code, 0) << convert.err;
  EXPECT_EQ(ParseJsonOutput(convert.out)["volume"]["digest"], push_["volume"]["digest"]);
  const size_t offset = RunPodThatHashesEveryFile("blocks", Ref(kModelRepo, "blocks-converted"));
  ASSERT_FALSE(HasFailure());
  RecordFigures("200 weight layers", "blocks", RequestsSince(offset));
  std::ifstream status(absl::StrCat("/proc/", daemon_->pid(), "/status"));
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0 || line.rfind("VmHWM:", 0) == 0) {
      std::cout << "[figures] modelfs-snapshotter after the 200-layer pod: " << line << "\n";
    }
  }
}

// No pointer where a model was meant: V (`convert --to`) in kVolumesRepo of the registry that
// stays up, its model M on a second registry that is down at the pod's first PullImage of V.
// containerd (2.3.4 in CTest) fetches V's manifest and config; the snapshotter's remote Prepare of
// V's layer fails UNAVAILABLE naming M's registry and the reason, so the pull fails (the kubelet
// retries it) and nothing is unpacked in the model's place. Once the registry answers again on
// the same port, the same pod's retried pull mounts the model and its reader sees every file.
class ModelRegistryOutageTest : public ImageVolumeTest {
 protected:
  void ConfigureDaemon(SnapshotterDaemonOptions& so) override {
    RegistryFixtureOptions mo;
    mo.access_log = true;
    ASSERT_OK_AND_ASSIGN(models_, RegistryFixture::Start(mo));
    so.insecure_hosts.push_back(models_->host_port());
    so.model_hosts.push_back(models_->host_port());
  }

  // modelfs_remote_prepares_total{result="<result>"} from the daemon's metrics; -1 if absent.
  int64_t RemotePrepares(const std::string& result) {
    long status = 0;
    absl::StatusOr<std::string> metrics = HttpGetForTest(daemon_->metrics_url(), &status);
    EXPECT_OK(metrics.status());
    if (!metrics.ok()) return -1;
    const std::string series =
        absl::StrCat("modelfs_remote_prepares_total{result=\"", result, "\"} ");
    const size_t at = metrics->find(series);
    if (at == std::string::npos) return -1;
    return std::stoll(metrics->substr(at + series.size()));
  }

  // `ctr snapshots ls` of the modelfs snapshotter (containerd's view of its snapshots).
  std::string Snapshots() {
    absl::StatusOr<ProcessResult> ls =
        containerd_->Ctr({"snapshots", "--snapshotter", "modelfs", "ls"});
    EXPECT_OK(ls.status());
    if (!ls.ok()) return "";
    EXPECT_EQ(ls->exit_code, 0) << ls->err;
    return ls->out;
  }

  std::unique_ptr<RegistryFixture> models_;  // M's registry, stopped and restarted
};

TEST_F(ModelRegistryOutageTest, APullWhileTheModelsRegistryIsDownFailsAndTheRetryStartsThePod) {
  source_ = tmp_.Join("model").string();
  ASSERT_OK(WriteTestModel(source_, /*seed=*/43).status());
  const std::string m_ref = absl::StrCat(models_->host_port(), "/", kModelRepo, ":v1");
  ASSERT_OK_AND_ASSIGN(ProcessResult push,
                       RunModelfs({"push", "--plain-http", "--json", m_ref, source_}));
  ASSERT_EQ(push.exit_code, 0) << push.err;
  const std::string model_digest = ParseJsonOutput(push.out)["model"]["digest"];
  const std::string v_ref = Ref(kVolumesRepo, "llama");
  const nlohmann::json converted = Convert({m_ref, "--to", v_ref});
  ASSERT_TRUE(converted.is_object()) << converted;
  const std::string model_dir = daemon_->root() + "/mnt/sha256-" + model_digest.substr(7);

  // The pod's sandbox (busybox, from the registry that stays up), then M's registry goes down.
  Pod pod;
  pod.spec.name = "outage";
  pod.spec.uid = "outage-uid";
  pod.spec.log_directory = tmp_.Join("pods/outage").string();
  fs::create_directories(pod.spec.log_directory);
  ASSERT_OK_AND_ASSIGN(pod.sandbox_id, runtime_->RunPodSandbox(pod.spec));
  sandboxes_.push_back(pod.sandbox_id);
  ASSERT_OK_AND_ASSIGN(pod.reader_image_ref,
                       images_->PullImageForPod(busybox_.reference, pod.spec));
  const std::string snapshots_before = Snapshots();
  EXPECT_THAT(snapshots_before, ::testing::HasSubstr("Committed"));  // busybox's layer
  models_->Stop();

  absl::Time t0 = absl::Now();
  absl::StatusOr<std::string> pulled = images_->PullImageForPod(v_ref, pod.spec);
  const absl::Duration failed_after = absl::Now() - t0;
  ASSERT_FALSE(pulled.ok()) << "pulled " << *pulled;
  const std::string why(pulled.status().message());
  std::cout << "[registry down] CRI PullImage failed after " << absl::FormatDuration(failed_after)
            << ", " << absl::StatusCodeToString(pulled.status().code()) << ": " << why << "\n";
  EXPECT_THAT(why, ::testing::HasSubstr(absl::StrCat("model ", model_digest,
                                                     " cannot be reached on registry ",
                                                     models_->host_port(), " (UNAVAILABLE: ")));
  EXPECT_EQ(pulled.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(why, ::testing::HasSubstr(
                       absl::StrCat("volume image ", registry_->host_port(), "/", kVolumesRepo, "@",
                                    converted["volume"]["digest"].get<std::string>(), ": model ")));
  EXPECT_THAT(why, ::testing::HasSubstr("the pull fails so that it is retried"));
  // Nothing in the model's place: no model registered, no snapshot left by the failed pull,
  // no fallback to V's pointer layer.
  EXPECT_FALSE(fs::exists(model_dir));
  EXPECT_EQ(Snapshots(), snapshots_before);
  EXPECT_THAT(ReadFileOrDie(daemon_->log_path()),
              ::testing::Not(::testing::HasSubstr("unpacking the volume layer instead")));
  EXPECT_EQ(RemotePrepares("fallback"), 0);
  EXPECT_EQ(RemotePrepares("mounted"), 0);
  // containerd (2.1 to 2.3) asks once per pull: one refused remote Prepare.
  const int64_t errors = RemotePrepares("error");
  EXPECT_EQ(errors, 1);

  // The registry answers again, on the same port: the kubelet's retry of the same pod's pull.
  ASSERT_OK(models_->Restart());
  ASSERT_OK_AND_ASSIGN(pod.volume_image_ref, images_->PullImageForPod(v_ref, pod.spec));
  EXPECT_EQ(pod.volume_image_ref, RoleDigest(converted, "volume config"));
  int exit_code = -1;
  std::map<std::string, std::string> seen =
      ParseSha256sum(RunReader(pod, kHashEveryFile, &exit_code));
  EXPECT_EQ(exit_code, 0);
  EXPECT_EQ(seen.erase(".modelinfo.json"), 1u) << "no .modelinfo.json in the volume";
  EXPECT_EQ(seen, DescribeFiles(source_));
  EXPECT_TRUE(fs::exists(model_dir));
  EXPECT_EQ(RemotePrepares("fallback"), 0);
  EXPECT_EQ(RemotePrepares("mounted"), 1);
  EXPECT_EQ(RemotePrepares("error"), errors);
}

// A pod whose image volume names the ModelPack artifact M itself (not V). containerd (2.1 to 2.3)
// downloads M whole (its manifest, config and every layer: the eager path) and asks the
// snapshotter for an empty snapshot; modelfs serves the model from containerd's content store,
// verified, and fetches nothing from the registry. Deleting the pod unmounts the volume.
// The parameter is the layers' encoding: "raw", "tar" or "zstd" (push --compress zstd, whose
// layers the cache reads from the content store and decodes).
class PlainModelPackVolumeTest : public ImageVolumeTest,
                                 public ::testing::WithParamInterface<std::string> {};

TEST_P(PlainModelPackVolumeTest, PodWithThePlainModelPackArtifactReadsEveryModelFileExactly) {
  const std::string encoding = GetParam();
  PushModel(/*tar=*/encoding != "raw", /*zstd=*/encoding == "zstd");
  ASSERT_FALSE(HasFatalFailure());
  const std::string pod = encoding == "raw" ? "plain-m" : "plain-m-" + encoding;
  const size_t offset =
      RunPodThatHashesEveryFile(pod, Ref(kModelRepo, encoding == "raw" ? "v1" : "v1-" + encoding),
                                /*image_config_role=*/"config");
  ASSERT_FALSE(HasFailure());
  const std::vector<Request> requests = RequestsSince(offset);
  std::cout << "[registry] traffic of the pod:\n"
            << DescribeTraffic(requests) << "[registry] blobs of the model's repository:\n"
            << DescribeModelBlobs(requests);
  EXPECT_TRUE(BlobBytes(requests, kModelRepo, "modelfs").empty());
  // containerd downloaded M whole: its config and every layer, each once.
  std::map<std::string, std::map<int, uint64_t>> want;
  for (const auto& b : push_["blobs"]) {
    const std::string role = b["role"];
    if (absl::StartsWith(role, "volume")) continue;
    want[b["digest"].get<std::string>()][200] += b["size"].get<uint64_t>();
  }
  EXPECT_EQ(BlobBytes(requests, kModelRepo, "containerd"), want);
  RecordFigures(absl::StrCat("plain M (", encoding, " layers)"), pod, requests);
  const std::string log = ReadFileOrDie(daemon_->log_path());
  EXPECT_TRUE(absl::StrContains(log, "from containerd's content store")) << "daemon log:\n" << log;

  DeletePods();
  EXPECT_EQ(MountsUnder(containerd_->dir()), std::vector<std::string>{});
  EXPECT_EQ(MountsUnder(daemon_->root()), std::vector<std::string>{daemon_->root() + "/mnt"});
  // containerd's garbage collector removes the volume's snapshot, which takes the model out
  // of modelfs's tree. `ctr images rm --sync` runs a collection now, as image GC would.
  const std::string model_dir =
      daemon_->root() + "/mnt/sha256-" + push_["model"]["digest"].get<std::string>().substr(7);
  ASSERT_OK_AND_ASSIGN(
      ProcessResult rm,
      containerd_->Ctr({"images", "rm", "--sync",
                        Ref(kModelRepo, encoding == "raw" ? "v1" : "v1-" + encoding)}));
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  for (int i = 0; i < 100 && fs::exists(model_dir); ++i) absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(fs::exists(model_dir));
  EXPECT_EQ(MountsUnder(daemon_->root()), std::vector<std::string>{daemon_->root() + "/mnt"});
}

INSTANTIATE_TEST_SUITE_P(EveryEncoding, PlainModelPackVolumeTest,
                         ::testing::Values("raw", "tar", "zstd"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return p.param == "raw"   ? std::string("RawLayers")
                                  : p.param == "tar" ? std::string("TarLayers")
                                                     : std::string("ZstdLayers");
                         });

// A KServe modelcar (an ordinary image: a busybox layer with its symlinks, then /models) and
// the volume image `modelfs convert` writes for it (issue 30): the pod's image volume shows the
// modelcar's merged tree, so its models/ holds the model byte for byte (mounted without a
// subPath; KServe's `subPath: models`, applied by containerd 2.2 and later, mounts exactly that
// directory).
TEST_F(ImageVolumeTest, PodWithTheVolumeImageOfAModelcarSeesItsModelsDirectory) {
  const std::string src = tmp_.Join("modelcar-src").string();
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> written, WriteTestModel(src, /*seed=*/30));
  std::vector<LayerFile> base = {{"bin/busybox", ReadFileOrDie(kBusyboxBinary), 0755, ""},
                                 {"bin/sh", "", 0777, "busybox"}};
  std::vector<LayerFile> models;
  std::map<std::string, std::string> want = {
      {"bin/busybox", Digest::Of(ReadFileOrDie(kBusyboxBinary)).str()}};
  for (const std::string& f : written) {
    const std::string bytes = ReadFileOrDie(src + "/" + f);
    models.push_back({"models/" + f, bytes, 0644, ""});
    want["models/" + f] = Digest::Of(bytes).str();
  }
  ASSERT_OK_AND_ASSIGN(
      PushedImage modelcar,
      PushOrdinaryImage(registry_->host_port(), "e2e/modelcar", "v1", {base, models}));
  const nlohmann::json converted = Convert({modelcar.reference});
  ASSERT_TRUE(converted.is_object()) << converted;
  const size_t offset = RunPodThatHashes(
      "modelcar-volume", absl::StrCat(registry_->host_port(), "/e2e/modelcar:v1-volume"),
      RoleDigest(converted, "volume config"), want);
  ASSERT_FALSE(HasFailure());
  const std::vector<Request> requests = RequestsSince(offset);
  std::cout << "[registry] traffic of the pod:\n" << DescribeTraffic(requests);
  std::set<std::string> containerd_blobs;
  for (const auto& [digest, by_status] : BlobBytes(requests, "e2e/modelcar", "containerd")) {
    containerd_blobs.insert(digest);
  }
  EXPECT_EQ(containerd_blobs, std::set<std::string>{RoleDigest(converted, "volume config")});
  RecordFigures("KServe modelcar, through its V (lazy)", "modelcar-volume", requests);
}

// A node with a signature policy (snapshotter.toml `policy`): image volumes under
// <registry>/e2e must carry a cosign signature by the team's key; everything else (the pause
// and reader images are not image volumes, and the policy only judges those) is accepted.
// Keys are made here; signatures are written with modelfs's own signer into the .sig tag.
class SignedVolumeTest : public ImageVolumeTest {
 protected:
  void ConfigureDaemon(SnapshotterDaemonOptions& so) override {
    team_key_ = NewKey("team");
    other_key_ = NewKey("other");
    policy_path_ = tmp_.Join("policy.json").string();
    WritePolicy(team_key_.pub_path);
    so.policy = policy_path_;
  }

  struct Key {
    std::unique_ptr<PrivateKey> key;
    std::string pub_path;
  };
  Key NewKey(const std::string& name) {
    Key k;
    EVP_PKEY* pkey = EVP_EC_gen("P-256");
    EXPECT_NE(pkey, nullptr);
    BIO* bio = BIO_new(BIO_s_mem());
    PEM_write_bio_PrivateKey(bio, pkey, nullptr, nullptr, 0, nullptr, nullptr);
    char* data = nullptr;
    long n = BIO_get_mem_data(bio, &data);
    absl::StatusOr<PrivateKey> key = PrivateKey::FromPem(std::string(data, n), name, "");
    BIO_free(bio);
    EVP_PKEY_free(pkey);
    EXPECT_OK(key.status());
    if (!key.ok()) return k;
    k.key = std::make_unique<PrivateKey>(*std::move(key));
    k.pub_path = tmp_.WriteFile(name + ".pub", k.key->public_key().Pem()).string();
    return k;
  }

  // default: insecureAcceptAnything; <registry>/e2e: sigstoreSigned by `key_path`.
  void WritePolicy(const std::string& key_path) {
    nlohmann::json policy = {{"default", {{{"type", "insecureAcceptAnything"}}}},
                             {"transports",
                              {{"docker",
                                {{absl::StrCat(registry_->host_port(), "/e2e"),
                                  {{{"type", "sigstoreSigned"}, {"keyPath", key_path}}}}}}}}};
    std::ofstream(policy_path_, std::ios::trunc) << policy.dump(2);
  }

  // Signs V (pushed at v1-volume) as `modelfs sign` does, with `key`.
  void SignVolume(const Key& key) {
    Sign(Ref(kModelRepo, "v1-volume"), push_["volume"]["digest"].get<std::string>(), key);
  }
  void Sign(const std::string& ref, const std::string& manifest_digest, const Key& key) {
    ASSERT_OK_AND_ASSIGN(auto client, ConnectPlainHttp(registry_->host_port()));
    RegistrySignatureStore store(client.get());
    ASSERT_OK_AND_ASSIGN(ImageReference image, ImageReference::Parse(ref));
    ASSERT_OK_AND_ASSIGN(Digest digest, Digest::Parse(manifest_digest));
    ASSERT_OK(SignImage(store, image, digest, *key.key).status());
  }

  std::string ModelDir() const {
    return daemon_->root() + "/mnt/sha256-" + push_["model"]["digest"].get<std::string>().substr(7);
  }

  // PullImage of V for a new pod, as StartPodAndPullVolume, returning PullImage's answer.
  absl::StatusOr<std::string> PullVolumeForNewPod(const std::string& name) {
    CriPodSpec spec;
    spec.name = name;
    spec.uid = name + "-uid";
    spec.log_directory = tmp_.Join("pods/" + name).string();
    fs::create_directories(spec.log_directory);
    absl::StatusOr<std::string> sandbox = runtime_->RunPodSandbox(spec);
    if (!sandbox.ok()) return sandbox.status();
    sandboxes_.push_back(*sandbox);
    return images_->PullImageForPod(Ref(kModelRepo, "v1-volume"), spec);
  }

  // A refused volume image: PullImage fails naming the reference, digest, policy, scope and
  // `reason`; no model is registered and modelfs read nothing of V's layer or of M.
  void ExpectRefused(const std::string& pod, const std::string& reason) {
    const size_t offset = LogOffset();
    absl::StatusOr<std::string> pulled = PullVolumeForNewPod(pod);
    ASSERT_FALSE(pulled.ok()) << "PullImage accepted it: " << *pulled;
    const std::string why(pulled.status().message());
    std::cout << "[refusal] " << pod << ": " << why << "\n";
    EXPECT_THAT(why, ::testing::HasSubstr(Ref(kModelRepo, "v1-volume")));
    EXPECT_THAT(why, ::testing::HasSubstr(push_["volume"]["digest"].get<std::string>()));
    EXPECT_THAT(why, ::testing::HasSubstr(policy_path_));
    EXPECT_THAT(
        why, ::testing::HasSubstr(absl::StrCat("scope docker:", registry_->host_port(), "/e2e")));
    EXPECT_THAT(why, ::testing::HasSubstr(reason));
    EXPECT_FALSE(fs::exists(ModelDir()));
    EXPECT_EQ(MountsUnder(daemon_->root()), std::vector<std::string>{daemon_->root() + "/mnt"});
    // (The signature payloads in the .sig tag are blobs of the same repository: those it read.)
    const auto modelfs = BlobBytes(RequestsSince(offset), kModelRepo, "modelfs");
    for (const auto& b : push_["blobs"]) {
      EXPECT_EQ(modelfs.count(b["digest"].get<std::string>()), 0u)
          << b["role"] << " was read\n"
          << DescribeTraffic(RequestsSince(offset));
    }
    long status = 0;
    absl::StatusOr<std::string> metrics = HttpGetForTest(daemon_->metrics_url(), &status);
    ASSERT_OK(metrics.status());
    EXPECT_THAT(*metrics, ::testing::HasSubstr(absl::StrCat(
                              "modelfs_policy_refusals_total{reason=\"", reason, "\"} 1\n")));
  }

  Key team_key_;
  Key other_key_;
  std::string policy_path_;
};

TEST_F(SignedVolumeTest, APodWhoseVolumeImageIsSignedByTheTrustedKeySeesTheModel) {
  PushModel();
  ASSERT_FALSE(HasFatalFailure());
  SignVolume(team_key_);
  ASSERT_FALSE(HasFatalFailure());
  RunPodThatHashesEveryFile("signed", Ref(kModelRepo, "v1-volume"));
  EXPECT_TRUE(fs::exists(ModelDir()));
}

TEST_F(SignedVolumeTest, APodNamingAnUnsignedVolumeImageIsRefused) {
  PushModel();
  ASSERT_FALSE(HasFatalFailure());
  ExpectRefused("unsigned", "no_signature");
}

TEST_F(SignedVolumeTest, APodNamingAVolumeImageSignedByAnUnknownKeyIsRefused) {
  PushModel();
  ASSERT_FALSE(HasFatalFailure());
  SignVolume(other_key_);
  ASSERT_FALSE(HasFatalFailure());
  ExpectRefused("unknown-key", "no_key_matched");
}

// V in another repository (`convert --to`) sends the node to M's repository: the policy must
// accept M there too, under M's own scope, even though V itself is signed and trusted.
TEST_F(SignedVolumeTest, AModelWhoseOwnScopeRejectsIsRefusedThoughItsVolumeImageIsSigned) {
  PushModel();
  ASSERT_FALSE(HasFatalFailure());
  const nlohmann::json converted =
      Convert({Ref(kModelRepo, "v1"), "--to", Ref(kVolumesRepo, "llama")});
  ASSERT_TRUE(converted.is_object()) << converted;
  const std::string v_digest = converted["volume"]["digest"];
  Sign(Ref(kVolumesRepo, "llama"), v_digest, team_key_);
  ASSERT_FALSE(HasFatalFailure());
  nlohmann::json policy = {
      {"default", {{{"type", "insecureAcceptAnything"}}}},
      {"transports",
       {{"docker",
         {{absl::StrCat(registry_->host_port(), "/", kVolumesRepo),
           {{{"type", "sigstoreSigned"}, {"keyPath", team_key_.pub_path}}}},
          {absl::StrCat(registry_->host_port(), "/", kModelRepo), {{{"type", "reject"}}}}}}}}};
  std::ofstream(policy_path_, std::ios::trunc) << policy.dump(2);
  CriPodSpec spec;
  spec.name = "model-rejected";
  spec.uid = "model-rejected-uid";
  spec.log_directory = tmp_.Join("pods/model-rejected").string();
  fs::create_directories(spec.log_directory);
  ASSERT_OK_AND_ASSIGN(std::string sandbox, runtime_->RunPodSandbox(spec));
  sandboxes_.push_back(sandbox);
  absl::StatusOr<std::string> pulled = images_->PullImageForPod(Ref(kVolumesRepo, "llama"), spec);
  ASSERT_FALSE(pulled.ok()) << "PullImage accepted it";
  const std::string why(pulled.status().message());
  std::cout << "[refusal] model location: " << why << "\n";
  EXPECT_THAT(
      why, ::testing::HasSubstr(absl::StrCat("model ", registry_->host_port(), "/", kModelRepo, "@",
                                             push_["model"]["digest"].get<std::string>())));
  EXPECT_THAT(why, ::testing::HasSubstr(
                       absl::StrCat("scope docker:", registry_->host_port(), "/", kModelRepo)));
  EXPECT_THAT(why, ::testing::HasSubstr("rejected_by_policy"));
  EXPECT_FALSE(fs::exists(ModelDir()));
}

// A plain ModelPack artifact M from containerd's content store: judged under the names
// containerd's image store gives its manifest, when the pod's container is created.
TEST_F(SignedVolumeTest, APodNamingASignedPlainModelPackArtifactSeesTheModel) {
  PushModel();
  ASSERT_FALSE(HasFatalFailure());
  Sign(Ref(kModelRepo, "v1"), push_["model"]["digest"].get<std::string>(), team_key_);
  ASSERT_FALSE(HasFatalFailure());
  RunPodThatHashesEveryFile("plain-signed", Ref(kModelRepo, "v1"), /*image_config_role=*/"config");
  EXPECT_TRUE(fs::exists(ModelDir()));
}

TEST_F(SignedVolumeTest, APodNamingAnUnsignedPlainModelPackArtifactFailsAtCreateContainer) {
  PushModel();
  ASSERT_FALSE(HasFatalFailure());
  Pod pod = StartPodAndPullVolume("plain-unsigned", Ref(kModelRepo, "v1"));
  ASSERT_FALSE(pod.volume_image_ref.empty());
  CriContainerSpec c;
  c.name = "reader";
  c.image = pod.reader_image_ref;
  c.command = {"/bin/sh", "-c", "cat /models/config.json"};
  c.mounts = {{kMountPath, "", pod.volume_image_ref, true}};
  c.log_path = "reader.log";
  absl::StatusOr<std::string> id = runtime_->CreateContainer(pod.sandbox_id, c, pod.spec);
  if (id.ok()) containers_.push_back(*id);
  ASSERT_FALSE(id.ok()) << "CreateContainer accepted it";
  const std::string why(id.status().message());
  std::cout << "[refusal] plain M at CreateContainer: " << why << "\n";
  // Judged under the name containerd's image store gives M (what the pod named).
  EXPECT_THAT(why, ::testing::HasSubstr(absl::StrCat("model ", Ref(kModelRepo, "v1"), " (",
                                                     push_["model"]["digest"].get<std::string>(),
                                                     ") refused by policy")));
  EXPECT_THAT(why, ::testing::HasSubstr("no_signature"));
  EXPECT_FALSE(fs::exists(ModelDir()));
}

// The policy is read again when it changes, and each container is held to it: a model pulled
// while its key was trusted is refused at CreateContainer once the policy trusts another key,
// with the reason in containerd's error.
TEST_F(SignedVolumeTest, CreateContainerIsRefusedOnceThePolicyNoLongerTrustsTheKey) {
  PushModel();
  ASSERT_FALSE(HasFatalFailure());
  SignVolume(team_key_);
  ASSERT_FALSE(HasFatalFailure());
  Pod pod = StartPodAndPullVolume("revoked", Ref(kModelRepo, "v1-volume"));
  ASSERT_FALSE(pod.volume_image_ref.empty());
  WritePolicy(other_key_.pub_path);
  CriContainerSpec c;
  c.name = "reader";
  c.image = pod.reader_image_ref;
  c.command = {"/bin/sh", "-c", "cat /models/config.json"};
  c.mounts = {{kMountPath, "", pod.volume_image_ref, true}};
  c.log_path = "reader.log";
  absl::StatusOr<std::string> id = runtime_->CreateContainer(pod.sandbox_id, c, pod.spec);
  if (id.ok()) containers_.push_back(*id);
  ASSERT_FALSE(id.ok()) << "CreateContainer accepted it";
  const std::string why(id.status().message());
  std::cout << "[refusal] CreateContainer: " << why << "\n";
  EXPECT_THAT(why, ::testing::HasSubstr("no_key_matched"));
  EXPECT_THAT(why, ::testing::HasSubstr(push_["volume"]["digest"].get<std::string>()));
}

// require_equivalence on a node: the derived repository (kDerivedRepo, listed as
// "<registry>/e2e/quantized/*") needs an equivalence attestation signed by the trusted key
// (equivalence_keys); the source (a bf16 checkpoint in kModelRepo) is not listed. The derived
// model is a Q8_0 GGUF of the same weights made with the project's writer and quantizer
// (testsupport/synth/equivalent_models.h), attested with `modelfs attest equivalence`.
class EquivalenceVolumeTest : public ImageVolumeTest {
 protected:
  static constexpr char kDerivedRepo[] = "e2e/quantized/llama";

  void ConfigureDaemon(SnapshotterDaemonOptions& so) override {
    trusted_key_ = WriteKeyPair("quantizer");
    stranger_key_ = WriteKeyPair("stranger");
    so.top_level_config =
        absl::StrCat("require_equivalence = [\"", registry_->host_port(),
                     "/e2e/quantized/*\"]\nequivalence_keys = [\"", trusted_key_ + ".pub", "\"]\n");
  }

  // A P-256 pair at <tmp>/<name>.pem and <name>.pub; returns the path without the extension.
  std::string WriteKeyPair(const std::string& name) {
    PemPair pair = GenerateKey();
    tmp_.WriteFile(name + ".pem", pair.private_pem);
    tmp_.WriteFile(name + ".pub", pair.public_pem);
    return tmp_.Join(name).string();
  }

  // `modelfs push` of the tiny llama: the bf16 safetensors checkpoint at kModelRepo:bf16 (V at
  // bf16-volume) and its Q8_0 GGUF at kDerivedRepo:q8 (V at q8-volume).
  void PushSourceAndDerived() {
    source_dir_ = tmp_.Join("bf16").string();
    derived_dir_ = tmp_.Join("q8").string();
    fs::create_directories(source_dir_);
    fs::create_directories(derived_dir_);
    ASSERT_OK(WriteEquivalenceSafetensors(source_dir_ + "/model.safetensors", {}));
    ASSERT_OK(WriteEquivalenceGguf(derived_dir_ + "/model.gguf", {}));
    ASSERT_OK_AND_ASSIGN(
        ProcessResult src,
        RunModelfs({"push", "--plain-http", Ref(kModelRepo, "bf16"), source_dir_, "--json"}));
    ASSERT_EQ(src.exit_code, 0) << src.err;
    source_push_ = ParseJsonOutput(src.out);
    ASSERT_TRUE(source_push_.is_object()) << src.out;
    ASSERT_OK_AND_ASSIGN(
        ProcessResult derived,
        RunModelfs({"push", "--plain-http", Ref(kDerivedRepo, "q8"), derived_dir_, "--json"}));
    ASSERT_EQ(derived.exit_code, 0) << derived.err;
    derived_push_ = ParseJsonOutput(derived.out);
    ASSERT_TRUE(derived_push_.is_object()) << derived.out;
  }

  // `modelfs attest equivalence` of the derived V against the source V, signed with `key`.
  void Attest(const std::string& key) {
    ASSERT_OK_AND_ASSIGN(
        ProcessResult r,
        RunModelfs({"attest", "equivalence", Ref(kDerivedRepo, "q8-volume"), "--source",
                    Ref(kModelRepo, "bf16-volume"), "--plain-http", "--sign-key", key + ".pem"}));
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_THAT(r.out, ::testing::HasSubstr("verdict    equivalent"));
    EXPECT_THAT(r.out, ::testing::HasSubstr("tolerance  BF16->Q8_0"));
  }

  std::string DerivedVolumeDigest() const { return derived_push_["volume"]["digest"]; }
  std::string DerivedModelDir() const {
    return daemon_->root() + "/mnt/sha256-" +
           derived_push_["model"]["digest"].get<std::string>().substr(7);
  }

  // A pod naming the derived V is refused at PullImage (V's remote Prepare): CRI's error names
  // the reference, the digest, the requirement's repository and `reason`; the daemon logs the
  // refusal with the image and reason; nothing is mounted and modelfs read none of the derived
  // model's blobs.
  void ExpectRefused(const std::string& name, const std::string& reason) {
    const size_t registry_offset = LogOffset();
    const size_t log_offset = ReadFileOrDie(daemon_->log_path()).size();
    CriPodSpec spec;
    spec.name = name;
    spec.uid = name + "-uid";
    spec.log_directory = tmp_.Join("pods/" + name).string();
    fs::create_directories(spec.log_directory);
    ASSERT_OK_AND_ASSIGN(std::string sandbox, runtime_->RunPodSandbox(spec));
    sandboxes_.push_back(sandbox);
    absl::StatusOr<std::string> pulled =
        images_->PullImageForPod(Ref(kDerivedRepo, "q8-volume"), spec);
    ASSERT_FALSE(pulled.ok()) << "PullImage accepted it: " << *pulled;
    const std::string why(pulled.status().message());
    std::cout << "[refusal] " << name << ": " << why << "\n";
    EXPECT_THAT(why, ::testing::HasSubstr(absl::StrCat(Ref(kDerivedRepo, "q8-volume"), " (",
                                                       DerivedVolumeDigest(), ")")));
    EXPECT_THAT(why, ::testing::HasSubstr(absl::StrCat(
                         "has no accepted equivalence attestation, which require_equivalence "
                         "asks of ",
                         registry_->host_port(), "/", kDerivedRepo, ": ", reason, ": ")));
    // The daemon's log: one policy event of the refusal, naming the image, the digest and the
    // reason (docs/snapshotter.md, the log events).
    const std::string log = ReadFileOrDie(daemon_->log_path()).substr(log_offset);
    int events = 0;
    for (absl::string_view line : absl::StrSplit(log, '\n')) {
      if (!absl::StrContains(line,
                             "msg=\"volume image refused: no accepted equivalence attestation\"")) {
        continue;
      }
      ++events;
      EXPECT_THAT(std::string(line), ::testing::HasSubstr("level=error component=policy"));
      EXPECT_THAT(std::string(line), ::testing::HasSubstr("reason=equivalence"));
      EXPECT_THAT(std::string(line), ::testing::HasSubstr(Ref(kDerivedRepo, "q8-volume")));
      EXPECT_THAT(std::string(line), ::testing::HasSubstr(DerivedVolumeDigest()));
      EXPECT_THAT(std::string(line), ::testing::HasSubstr(reason));
    }
    EXPECT_EQ(events, 1) << "refusal events in the daemon's log:\n" << log;
    EXPECT_FALSE(fs::exists(DerivedModelDir()));
    EXPECT_EQ(MountsUnder(daemon_->root()), std::vector<std::string>{daemon_->root() + "/mnt"});
    // (The attestation's envelopes are blobs of the same repository: those it read.)
    const auto modelfs = BlobBytes(RequestsSince(registry_offset), kDerivedRepo, "modelfs");
    for (const auto& b : derived_push_["blobs"]) {
      EXPECT_EQ(modelfs.count(b["digest"].get<std::string>()), 0u)
          << b["role"] << " was read\n"
          << DescribeTraffic(RequestsSince(registry_offset));
    }
  }

  std::string trusted_key_;
  std::string stranger_key_;
  std::string source_dir_;
  std::string derived_dir_;
  nlohmann::json source_push_;
  nlohmann::json derived_push_;
};

TEST_F(EquivalenceVolumeTest, APodNamingAnUnattestedDerivedModelIsRefusedNamingItAndTheReason) {
  PushSourceAndDerived();
  ASSERT_FALSE(HasFatalFailure());
  ExpectRefused("unattested", "no_attestation");
}

// Refusals are not kept: once the attestation is stored, the kubelet's next pull of the same V
// (a fresh pod) is accepted and the pod reads the GGUF byte for byte.
TEST_F(EquivalenceVolumeTest, AfterTheAttestationIsStoredAFreshPullReadsEveryFileExactly) {
  PushSourceAndDerived();
  ASSERT_FALSE(HasFatalFailure());
  ExpectRefused("before-attest", "no_attestation");
  ASSERT_FALSE(HasFatalFailure());
  Attest(trusted_key_);
  ASSERT_FALSE(HasFatalFailure());
  RunPodThatHashes("attested", Ref(kDerivedRepo, "q8-volume"),
                   RoleDigest(derived_push_, "volume config"), DescribeFiles(derived_dir_));
  EXPECT_TRUE(fs::exists(DerivedModelDir()));
}

TEST_F(EquivalenceVolumeTest, AnAttestationSignedByAnotherKeyIsRefused) {
  PushSourceAndDerived();
  ASSERT_FALSE(HasFatalFailure());
  Attest(stranger_key_);
  ASSERT_FALSE(HasFatalFailure());
  ExpectRefused("stranger", "no_key_matched");
}

// The source's repository is not listed: its V needs no attestation.
TEST_F(EquivalenceVolumeTest, APodNamingTheSourceOutsideTheListedRepositoriesNeedsNone) {
  PushSourceAndDerived();
  ASSERT_FALSE(HasFatalFailure());
  RunPodThatHashes("source", Ref(kModelRepo, "bf16-volume"),
                   RoleDigest(source_push_, "volume config"), DescribeFiles(source_dir_));
}

// The snapshotter restarted between two pods (SIGTERM, then the same binary on the same root):
// the restarted daemon registers the model again from its records, and a new pod on the same
// V, which containerd holds already, reads every file exactly.
TEST_F(ImageVolumeTest, APodStartedAfterTheSnapshotterRestartsReadsEveryModelFileExactly) {
  PushModel();
  ASSERT_FALSE(HasFatalFailure());
  RunPodThatHashesEveryFile("before-restart", Ref(kModelRepo, "v1-volume"));
  ASSERT_FALSE(HasFailure());
  DeletePods();
  EXPECT_EQ(daemon_->Stop(), 0);
  ASSERT_OK(daemon_->Restart());
  const size_t offset = RunPodThatHashesEveryFile("after-restart", Ref(kModelRepo, "v1-volume"));
  ASSERT_FALSE(HasFailure());
  const std::vector<Request> requests = RequestsSince(offset);
  std::cout << "[registry] traffic of the pod after the restart:\n" << DescribeTraffic(requests);
  // containerd holds V: it fetches nothing of the model again.
  EXPECT_TRUE(BlobBytes(requests, kModelRepo, "containerd").empty());
  RecordFigures("V by tag, after a snapshotter restart", "after-restart", requests);
}

// What containerd asks of the snapshotter for one pod on V (the daemon logs every call with its
// labels), summarised as "<call> [label keys] <result>" with a count, printed for the record of
// each release (docs/install.md, "What the snapshotter sees"). The remote Prepare of V's layer
// carries the labels modelfs reads to find the model, and is answered ALREADY_EXISTS once.
// The msg of one logfmt line of the daemon's log, unquoted ("" when it has none).
std::string LogfmtMsg(const std::string& line) {
  size_t at = line.find(" msg=");
  if (at == std::string::npos) return "";
  at += 5;
  std::string out;
  if (at < line.size() && line[at] == '"') {
    for (size_t i = at + 1; i < line.size() && line[i] != '"'; ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) ++i;
      out.push_back(line[i]);
    }
  } else {
    while (at < line.size() && line[at] != ' ') out.push_back(line[at++]);
  }
  return out;
}

TEST_F(ImageVolumeTest, TheRemotePrepareOfAPodsVolumeCarriesTheLabelsModelfsReads) {
  PushModel();
  ASSERT_FALSE(HasFatalFailure());
  const size_t log_before = ReadFileOrDie(daemon_->log_path()).size();
  RunPodThatHashesEveryFile("calls", Ref(kModelRepo, "v1-volume"));
  ASSERT_FALSE(HasFailure());
  DeletePods();
  const std::string log = ReadFileOrDie(daemon_->log_path()).substr(log_before);
  // Each call is one debug event of component "service"; its msg is the call line.
  static const std::regex call_re(
      "^(Prepare|View|Mounts|Commit|Remove|Stat|Update|List|Usage|Cleanup|"
      "Walk)( .*)?( ok| -> code ([0-9]+): .*)$");
  static const std::regex key_re("(?:\\{|, )\"((?:[^\"\\\\]|\\\\.)*)\"=");
  std::map<std::string, int> calls;
  std::vector<std::set<std::string>> remote_prepares;  // label keys of each Prepare of V's layer
  std::vector<std::string> remote_results;
  for (absl::string_view line : absl::StrSplit(log, '\n', absl::SkipEmpty())) {
    std::smatch m;
    if (!absl::StrContains(line, " level=debug component=service msg=")) continue;
    const std::string l = LogfmtMsg(std::string(line));
    if (!std::regex_match(l, m, call_re)) continue;
    const std::string args = m[2].str();
    std::set<std::string> keys;
    for (std::sregex_iterator it(args.begin(), args.end(), key_re), end; it != end; ++it) {
      keys.insert((*it)[1].str());
    }
    const std::string result = m[4].matched ? "code " + m[4].str() : "ok";
    calls[absl::StrCat(m[1].str(), " [", absl::StrJoin(keys, " "), "] ", result)]++;
    if (m[1] == "Prepare" && keys.contains("containerd.io/snapshot/cri.layer-digest") &&
        keys.contains("containerd.io/snapshot/modelfs.model")) {
      remote_prepares.push_back(keys);
      remote_results.push_back(result);
    }
  }
  for (const auto& [call, n] : calls) {
    std::cout << "[calls] containerd " << release_.version << ": " << n << " x " << call << "\n";
  }
  ASSERT_EQ(remote_prepares.size(), 1u) << log;
  EXPECT_EQ(remote_results[0], "code 6");  // ALREADY_EXISTS: the model is the snapshot
  for (const char* label :
       {"containerd.io/snapshot.ref", "containerd.io/snapshot/cri.image-ref",
        "containerd.io/snapshot/cri.manifest-digest", "containerd.io/snapshot/cri.layer-digest",
        "containerd.io/snapshot/modelfs.model"}) {
    EXPECT_TRUE(remote_prepares[0].contains(label)) << label << " missing";
  }
}

// Upgrading a node's containerd from 2.1.4 to the release under test (2.3.4 in CTest) under a
// running model pod, as an admin does it: stop containerd, start the new one on the same config
// (version 3 as docs/install.md writes it: nothing to migrate), root and state. The pod started
// on 2.1.4 keeps reading its model exactly across the upgrade, the new containerd reports its
// exit, and a new pod on the same V starts on the new release.
class ContainerdUpgradeTest : public ImageVolumeTest {
 protected:
  ContainerdUpgradeTest() { start_release_ = "2.1.4"; }
};

TEST_F(ContainerdUpgradeTest, APodStartedOn21KeepsReadingItsModelAcrossTheUpgrade) {
  if (release_.version == start_release_) GTEST_SKIP() << "no upgrade from 2.1.4 to itself";
  PushModel();
  ASSERT_FALSE(HasFatalFailure());
  Pod pod = StartPodAndPullVolume("upgrade", Ref(kModelRepo, "v1-volume"));
  ASSERT_FALSE(pod.volume_image_ref.empty());
  CriContainerSpec c;
  c.name = "reader";
  c.image = pod.reader_image_ref;
  c.command = {
      "/bin/sh", "-c",
      absl::StrCat("(", kHashEveryFile, "); echo upgrade-now; sleep 20; (", kHashEveryFile, ")")};
  c.mounts = {{kMountPath, "", pod.volume_image_ref, true}};
  c.log_path = "reader.log";
  ASSERT_OK_AND_ASSIGN(std::string id, runtime_->CreateContainer(pod.sandbox_id, c, pod.spec));
  containers_.push_back(id);
  ASSERT_OK(runtime_->StartContainer(id));
  const std::string log_path = pod.spec.log_directory + "/reader.log";
  const absl::Time deadline = absl::Now() + absl::Minutes(2);
  while (!absl::StrContains(ReadFileOrDie(log_path), "upgrade-now")) {
    ASSERT_LT(absl::Now(), deadline) << "the reader never got through its first round";
    absl::SleepFor(absl::Milliseconds(100));
  }
  const size_t containerd_log = ReadFileOrDie(containerd_->log_path()).size();
  const absl::Time t0 = absl::Now();
  ASSERT_OK(containerd_->Restart(release_dir_));
  std::cout << "[upgrade] containerd " << start_release_ << " -> " << release_.version << " in "
            << absl::FormatDuration(absl::Now() - t0) << "\n";
  ASSERT_OK_AND_ASSIGN(images_, CriImageClient::Connect(containerd_->grpc_target()));
  ASSERT_OK_AND_ASSIGN(runtime_, CriRuntimeClient::Connect(containerd_->grpc_target()));
  ASSERT_OK_AND_ASSIGN(CriContainerStatus st, runtime_->WaitForExit(id, absl::Minutes(3)));
  const std::string out = ParseCriLog(ReadFileOrDie(log_path));
  EXPECT_EQ(st.exit_code, 0) << out;
  const size_t split = out.find("upgrade-now\n");
  ASSERT_NE(split, std::string::npos) << out;
  std::map<std::string, std::string> before = ParseSha256sum(out.substr(0, split));
  std::map<std::string, std::string> after = ParseSha256sum(out.substr(split + 12));
  EXPECT_EQ(before.erase(".modelinfo.json"), 1u);
  EXPECT_EQ(after.erase(".modelinfo.json"), 1u);
  EXPECT_EQ(before, DescribeFiles(source_));
  EXPECT_EQ(after, DescribeFiles(source_));
  // What the new containerd said about the old config and state, for the record.
  for (absl::string_view line :
       absl::StrSplit(ReadFileOrDie(containerd_->log_path()).substr(containerd_log), '\n')) {
    if (absl::StrContains(line, "level=warn") || absl::StrContains(line, "level=error") ||
        absl::StrContains(line, "deprecat") || absl::StrContains(line, "migrat")) {
      std::cout << "[upgrade] containerd " << release_.version << ": " << line << "\n";
    }
  }
  // A new pod on the same V, on the new release.
  RunPodThatHashesEveryFile("after-upgrade", Ref(kModelRepo, "v1-volume"));
}

// KServe's layout (docs/install.md, "KServe"): V published with `push --path-prefix models`,
// mounted with `subPath: models`, which the kubelet passes as CRI Mount.image_sub_path.
// containerd 2.2 and later apply it (containerd#11578); SubPathIgnoredTest says what 2.1 does.
class SubPathTest : public ImageVolumeTest {
 protected:
  void SetUp() override {
    ImageVolumeTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (!release_.applies_image_sub_path) {
      GTEST_SKIP() << "containerd " << release_.version
                   << " ignores image_sub_path (SubPathIgnoredTest)";
    }
  }

  // CreateContainer of a reader mounting `pod`'s volume with `sub_path`: its error, or "" when
  // it was created (then it is started and waited for, and its output is in `out`).
  std::string CreateReaderWithSubPath(const Pod& pod, const std::string& name,
                                      const std::string& sub_path, const std::string& script,
                                      std::string* out) {
    CriContainerSpec c;
    c.name = name;
    c.image = pod.reader_image_ref;
    c.command = {"/bin/sh", "-c", script};
    c.mounts = {{kMountPath, "", pod.volume_image_ref, true, sub_path}};
    c.log_path = name + ".log";
    absl::StatusOr<std::string> id = runtime_->CreateContainer(pod.sandbox_id, c, pod.spec);
    if (!id.ok()) {
      std::cout << "[subPath] " << sub_path << ": CreateContainer failed: " << id.status() << "\n";
      return std::string(id.status().message());
    }
    containers_.push_back(*id);
    EXPECT_OK(runtime_->StartContainer(*id));
    absl::StatusOr<CriContainerStatus> st = runtime_->WaitForExit(*id, absl::Minutes(3));
    EXPECT_OK(st.status());
    *out = ParseCriLog(ReadFileOrDie(pod.spec.log_directory + "/" + name + ".log"));
    std::cout << "[subPath] " << sub_path << ": the container saw:\n" << *out;
    return "";
  }

  // A modelcar (busybox, then models/ with the test model) whose top layer also holds links:
  // `escape` leading out of the tree by `..`, `absolute` to /etc, `inside` to models; and the
  // volume image `modelfs convert` writes for it. Returns V's reference.
  std::string PushModelcarWithLinks() {
    const std::string src = tmp_.Join("linkcar-src").string();
    absl::StatusOr<std::vector<std::string>> written = WriteTestModel(src, /*seed=*/44);
    EXPECT_OK(written.status());
    if (!written.ok()) return "";
    std::vector<LayerFile> base = {{"bin/busybox", ReadFileOrDie(kBusyboxBinary), 0755, ""},
                                   {"bin/sh", "", 0777, "busybox"}};
    std::vector<LayerFile> models;
    for (const std::string& f : *written) {
      models.push_back({"models/" + f, ReadFileOrDie(src + "/" + f), 0644, ""});
    }
    models.push_back({"escape", "", 0777, "../../../../../../../../etc"});
    models.push_back({"absolute", "", 0777, "/etc"});
    models.push_back({"inside", "", 0777, "models"});
    absl::StatusOr<PushedImage> car =
        PushOrdinaryImage(registry_->host_port(), "e2e/linkcar", "v1", {base, models});
    EXPECT_OK(car.status());
    if (!car.ok()) return "";
    const nlohmann::json converted = Convert({car->reference});
    EXPECT_TRUE(converted.is_object()) << converted;
    linkcar_files_.clear();
    for (const std::string& f : *written) {
      linkcar_files_[f] = Digest::Of(ReadFileOrDie(src + "/" + f)).str();
    }
    return absl::StrCat(registry_->host_port(), "/e2e/linkcar:v1-volume");
  }

  std::map<std::string, std::string> linkcar_files_;  // models/'s files: path -> digest
};

TEST_F(SubPathTest, APodMountingTheModelsSubPathSeesExactlyTheModelsFilesAndItsModelinfo) {
  PushModel(/*tar=*/false, /*zstd=*/false, /*path_prefix=*/"models");
  ASSERT_FALSE(HasFatalFailure());
  image_sub_path_ = "models";
  // Exactly the model's files, at the mount's root, and .modelinfo.json beside them.
  const size_t offset =
      RunPodThatHashesEveryFile("kserve-layout", Ref(kModelRepo, "kserve-volume"));
  ASSERT_FALSE(HasFailure());
  ExpectLazyTraffic(RequestsSince(offset));
  RecordFigures("V --path-prefix models, subPath models", "kserve-layout", RequestsSince(offset));
  // Its .modelinfo.json lists the files by their paths under the mount.
  Pod pod = StartPodAndPullVolume("kserve-info", Ref(kModelRepo, "kserve-volume"));
  ASSERT_FALSE(pod.volume_image_ref.empty());
  int exit_code = -1;
  const std::string text = RunReader(pod, "cat /models/.modelinfo.json", &exit_code, "info");
  EXPECT_EQ(exit_code, 0);
  const nlohmann::json info = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(info.is_object()) << text;
  std::set<std::string> listed, want;
  for (const auto& f : info["files"]) listed.insert(f["path"].get<std::string>());
  for (const auto& [path, digest] : DescribeFiles(source_)) want.insert(path);
  EXPECT_EQ(listed, want);
}

// containerd 2.2 and 2.3 mount only directories: a subPath naming one file fails
// CreateContainer, naming it.
TEST_F(SubPathTest, ASubPathNamingOneFileFailsCreateContainerNamingIt) {
  PushModel(/*tar=*/false, /*zstd=*/false, /*path_prefix=*/"models");
  ASSERT_FALSE(HasFatalFailure());
  Pod pod = StartPodAndPullVolume("one-file", Ref(kModelRepo, "kserve-volume"));
  ASSERT_FALSE(pod.volume_image_ref.empty());
  std::string out;
  const std::string why =
      CreateReaderWithSubPath(pod, "one-file", "models/config.json", "cat /models", &out);
  ASSERT_NE(why, "") << "CreateContainer accepted a file as the subPath; the pod saw:\n" << out;
  EXPECT_THAT(why, ::testing::HasSubstr("\"models/config.json\""));
  EXPECT_THAT(why, ::testing::HasSubstr("only directory subpath is supported"));
}

TEST_F(SubPathTest, ASubPathThatDoesNotExistFailsCreateContainerNamingIt) {
  PushModel(/*tar=*/false, /*zstd=*/false, /*path_prefix=*/"models");
  ASSERT_FALSE(HasFatalFailure());
  Pod pod = StartPodAndPullVolume("missing", Ref(kModelRepo, "kserve-volume"));
  ASSERT_FALSE(pod.volume_image_ref.empty());
  std::string out;
  const std::string why = CreateReaderWithSubPath(pod, "missing", "weights", "ls /models", &out);
  ASSERT_NE(why, "") << "CreateContainer accepted a missing subPath; the pod saw:\n" << out;
  EXPECT_THAT(why, ::testing::HasSubstr("failed to ensure image subpath \"weights\""));
  EXPECT_THAT(why, ::testing::HasSubstr("no such file or directory"));
}

// containerd resolves a subPath inside the volume (Go's os.OpenInRoot) and modelfs serves
// links as links, never following them: a subPath through a link that leads out of the tree,
// by `..` or by an absolute target, fails CreateContainer naming it, and nothing outside the
// volume is mounted.
TEST_F(SubPathTest, ASubPathThroughASymlinkLeadingOutOfTheVolumeFailsCreateContainer) {
  const std::string v = PushModelcarWithLinks();
  ASSERT_FALSE(v.empty());
  Pod pod = StartPodAndPullVolume("links-out", v);
  ASSERT_FALSE(pod.volume_image_ref.empty());
  for (const std::string sub : {"escape", "absolute"}) {
    std::string out;
    const std::string why = CreateReaderWithSubPath(pod, "reader-" + sub, sub, "ls /models", &out);
    EXPECT_NE(why, "") << sub << ": CreateContainer accepted it; the pod saw:\n" << out;
    EXPECT_THAT(why, ::testing::HasSubstr(absl::StrCat("image subpath \"", sub, "\"")));
  }
}

// A link within the volume is followed by containerd's resolution: the pod sees the directory
// it names.
TEST_F(SubPathTest, ASubPathThroughASymlinkWithinTheVolumeMountsTheDirectoryItNames) {
  const std::string v = PushModelcarWithLinks();
  ASSERT_FALSE(v.empty());
  Pod pod = StartPodAndPullVolume("links-in", v);
  ASSERT_FALSE(pod.volume_image_ref.empty());
  std::string out;
  const std::string why = CreateReaderWithSubPath(pod, "inside", "inside", kHashEveryFile, &out);
  ASSERT_EQ(why, "");
  EXPECT_EQ(ParseSha256sum(out), linkcar_files_);
}

// Without a subPath the same volume shows the links as links: reading through `escape` inside
// the container resolves in the container's own root, never on the node.
TEST_F(SubPathTest, TheVolumeShowsItsLinksAsLinksAndNothingOfTheNode) {
  const std::string v = PushModelcarWithLinks();
  ASSERT_FALSE(v.empty());
  Pod pod = StartPodAndPullVolume("links-whole", v);
  ASSERT_FALSE(pod.volume_image_ref.empty());
  int exit_code = -1;
  const std::string out =
      RunReader(pod,
                "readlink /models/escape; readlink /models/absolute; readlink /models/inside; "
                "ls /models/escape/ | wc -l",
                &exit_code);
  EXPECT_EQ(exit_code, 0);
  // The node's /etc has many entries; the reader's root (busybox, /etc made by the runtime)
  // has a few at most.
  std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 4u) << out;
  EXPECT_EQ(lines[0], "../../../../../../../../etc");
  EXPECT_EQ(lines[1], "/etc");
  EXPECT_EQ(lines[2], "models");
  EXPECT_LT(std::stoi(lines[3]), 10) << out;
}

// containerd 2.1 ignores image_sub_path without an error (bottlerocket#4755): the pod gets the
// whole volume, the model under models/ and .modelinfo.json at the root and inside models/.
class SubPathIgnoredTest : public ImageVolumeTest {
 protected:
  void SetUp() override {
    ImageVolumeTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (release_.applies_image_sub_path) {
      GTEST_SKIP() << "containerd " << release_.version << " applies image_sub_path (SubPathTest)";
    }
  }
};

TEST_F(SubPathIgnoredTest, APodMountingTheModelsSubPathGetsTheWholeVolume) {
  PushModel(/*tar=*/false, /*zstd=*/false, /*path_prefix=*/"models");
  ASSERT_FALSE(HasFatalFailure());
  image_sub_path_ = "models";
  std::map<std::string, std::string> want;
  for (const auto& [path, digest] : DescribeFiles(source_)) want["models/" + path] = digest;
  Pod pod = StartPodAndPullVolume("subpath-ignored", Ref(kModelRepo, "kserve-volume"));
  ASSERT_FALSE(pod.volume_image_ref.empty());
  int exit_code = -1;
  std::map<std::string, std::string> seen =
      ParseSha256sum(RunReader(pod, kHashEveryFile, &exit_code));
  EXPECT_EQ(exit_code, 0);
  EXPECT_EQ(seen.erase(".modelinfo.json"), 1u);
  EXPECT_EQ(seen.erase("models/.modelinfo.json"), 1u);
  EXPECT_EQ(seen, want);
}

}  // namespace
}  // namespace modelfs::testing
