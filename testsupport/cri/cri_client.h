// Clients that talk to containerd the way a kubelet (and a node's tooling) does, for end-to-end
// tests and benchmarks of the modelfs snapshotter:
//  - CriImageClient: the CRI image service (runtime.v1, testsupport/cri/runtime/v1/api.proto)
//    served by containerd's CRI plugin on containerd's socket.
//  - CriRuntimeClient: the CRI runtime service for the pod and container lifecycle a kubelet
//    drives (sandbox on the host network, containers with host-path and image volume mounts,
//    their status and log file).
//  - SnapshotsClient: containerd's own Snapshots service (containerd.services.snapshots.v1) on
//    containerd's socket, for one snapshotter (request.snapshotter) in one namespace (gRPC
//    metadata `containerd-namespace`), so keys and parents are containerd's, as CRI sees them.
//  - MountAll / UnmountAll: mount(2) the mounts a snapshotter returns, as containerd would.
// gRPC failures become absl::Status with the same code and a message naming the call, the key
// or the image.
//
// Thread safety: both clients may be used from several threads (gRPC stubs are thread-safe);
// MountAll/UnmountAll keep no state.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace modelfs::testing {

struct CriImage {
  std::string id;  // the config digest, "sha256:<hex>"
  std::vector<std::string> repo_tags;
  std::vector<std::string> repo_digests;
  uint64_t size = 0;
};

// A pod sandbox as the kubelet describes it, reduced to what the tests need. The sandbox is
// always on the node's network (NamespaceMode NODE) with an empty hostname, so no CNI plugin is
// needed and runc is not asked for a hostname without a UTS namespace.
struct CriPodSpec {
  std::string name;
  std::string uid;
  std::string ns = "default";
  // Host directory for the containers' log files (PodSandboxConfig.log_directory); must exist.
  std::string log_directory;
};

class CriImageClient {
 public:
  // `target`: a gRPC target, "unix:///run/containerd/containerd.sock".
  static absl::StatusOr<std::unique_ptr<CriImageClient>> Connect(const std::string& target);
  ~CriImageClient();

  // PullImage; returns image_ref (the image ID). Errors: the gRPC code, message naming image.
  absl::StatusOr<std::string> PullImage(const std::string& image,
                                        absl::Duration timeout = absl::Minutes(5));
  // PullImage with the pod's sandbox config, as a kubelet pulls for a pod (containerd picks
  // the snapshotter of the pod's runtime handler from it).
  absl::StatusOr<std::string> PullImageForPod(const std::string& image, const CriPodSpec& pod,
                                              absl::Duration timeout = absl::Minutes(5));
  // nullopt when the image is not present.
  absl::StatusOr<std::optional<CriImage>> ImageStatus(const std::string& image,
                                                      absl::Duration timeout = absl::Seconds(30));
  absl::Status RemoveImage(const std::string& image, absl::Duration timeout = absl::Seconds(60));

 private:
  struct Impl;
  explicit CriImageClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One entry of ContainerConfig.mounts: a host path, or (when `image` is set) an image volume
// whose `image` is the image_ref PullImage returned, as the kubelet sets it.
struct CriMountSpec {
  std::string container_path;
  std::string host_path;
  std::string image;
  bool readonly = true;
  // With `image`: Mount.image_sub_path, the volume's subPath as the kubelet passes it ("" for
  // the image's root).
  std::string image_sub_path;
};

struct CriContainerSpec {
  std::string name;
  std::string image;  // an image reference or ID the runtime has pulled
  std::vector<std::string> command;
  std::vector<std::string> args;
  std::vector<CriMountSpec> mounts;
  // Relative to CriPodSpec::log_directory; the runtime writes stdout and stderr there in the
  // CRI log format (ParseCriLog).
  std::string log_path;
};

struct CriContainerStatus {
  enum class State { kCreated = 0, kRunning = 1, kExited = 2, kUnknown = 3 };
  std::string id;
  State state = State::kUnknown;
  int exit_code = 0;
  std::string reason;
  std::string message;
  std::string log_path;  // absolute, on the host
};

class CriRuntimeClient {
 public:
  // `target`: a gRPC target, "unix:///run/containerd/containerd.sock".
  static absl::StatusOr<std::unique_ptr<CriRuntimeClient>> Connect(const std::string& target);
  ~CriRuntimeClient();

  // RunPodSandbox with the default runtime handler; returns the sandbox ID. The runtime pulls
  // its sandbox (pause) image if needed.
  absl::StatusOr<std::string> RunPodSandbox(const CriPodSpec& pod,
                                            absl::Duration timeout = absl::Minutes(3));
  absl::Status StopPodSandbox(const std::string& sandbox_id,
                              absl::Duration timeout = absl::Minutes(1));
  absl::Status RemovePodSandbox(const std::string& sandbox_id,
                                absl::Duration timeout = absl::Minutes(1));
  // CreateContainer in `sandbox_id` (created with `pod`); returns the container ID.
  absl::StatusOr<std::string> CreateContainer(const std::string& sandbox_id,
                                              const CriContainerSpec& container,
                                              const CriPodSpec& pod,
                                              absl::Duration timeout = absl::Minutes(3));
  absl::Status StartContainer(const std::string& container_id,
                              absl::Duration timeout = absl::Minutes(1));
  // Stops within `grace` (then SIGKILL); idempotent.
  absl::Status StopContainer(const std::string& container_id,
                             absl::Duration grace = absl::Seconds(10));
  absl::Status RemoveContainer(const std::string& container_id,
                               absl::Duration timeout = absl::Minutes(1));
  absl::StatusOr<CriContainerStatus> ContainerStatus(const std::string& container_id,
                                                     absl::Duration timeout = absl::Seconds(30));
  // Polls ContainerStatus until the container has exited. Errors: kDeadlineExceeded (with the
  // last state) after `timeout`, or the ContainerStatus error.
  absl::StatusOr<CriContainerStatus> WaitForExit(const std::string& container_id,
                                                 absl::Duration timeout = absl::Minutes(2));

 private:
  struct Impl;
  explicit CriRuntimeClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The stdout (or stderr) text of a container log file in the CRI format: lines
// "<RFC3339Nano time> <stdout|stderr> <F|P> <text>", where P marks a partial line continued by
// the next one. Lines that do not parse are skipped.
std::string ParseCriLog(const std::string& log, const std::string& stream = "stdout");

// containerd.types.Mount.
struct SnapshotMount {
  std::string type;
  std::string source;
  std::vector<std::string> options;
  friend bool operator==(const SnapshotMount&, const SnapshotMount&) = default;
};

struct SnapshotInfo {
  enum class Kind { kUnknown = 0, kView = 1, kActive = 2, kCommitted = 3 };
  std::string name;
  std::string parent;
  Kind kind = Kind::kUnknown;
  std::map<std::string, std::string> labels;
};

// A snapshot with this label is a root for containerd's garbage collector. Snapshots prepared
// through the API without a lease or a container referencing them need it, or the next GC
// (which a pull triggers) removes them, mounted or not.
inline constexpr char kGcRootLabel[] = "containerd.io/gc.root";

class SnapshotsClient {
 public:
  // `snapshotter`: the name containerd knows it by ("modelfs", "overlayfs"); `ns`: the
  // containerd namespace ("k8s.io" for CRI).
  static absl::StatusOr<std::unique_ptr<SnapshotsClient>> Connect(const std::string& target,
                                                                  const std::string& snapshotter,
                                                                  const std::string& ns);
  ~SnapshotsClient();

  absl::StatusOr<std::vector<SnapshotMount>> Prepare(
      const std::string& key, const std::string& parent,
      const std::map<std::string, std::string>& labels = {});
  absl::StatusOr<std::vector<SnapshotMount>> View(
      const std::string& key, const std::string& parent,
      const std::map<std::string, std::string>& labels = {});
  absl::StatusOr<std::vector<SnapshotMount>> Mounts(const std::string& key);
  absl::Status Remove(const std::string& key);
  absl::StatusOr<SnapshotInfo> Stat(const std::string& key);
  // containerd filter strings ("parent==sha256:...", "labels.\"k\"==v"); none: all.
  absl::StatusOr<std::vector<SnapshotInfo>> List(const std::vector<std::string>& filters = {});

 private:
  struct Impl;
  explicit SnapshotsClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Mounts `mounts` on `target` in order (containerd's mount.All): "overlay" and other
// filesystem types with their options as data; "bind"/"rbind" options as MS_BIND(|MS_REC),
// remounted read-only for "ro". Errors: kInternal naming the mount type, source, target, errno.
absl::Status MountAll(const std::vector<SnapshotMount>& mounts, const std::string& target);

// umount2(target, 0) until nothing is mounted there (MNT_DETACH when `lazy`).
absl::Status UnmountAll(const std::string& target, bool lazy = false);

std::string DescribeMounts(const std::vector<SnapshotMount>& mounts);

}  // namespace modelfs::testing
