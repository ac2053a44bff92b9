// modelfs-cri-client: what a kubelet and a container runtime do to get an image's files in
// front of a process, one step at a time, for benchmarks and by-hand checks against a
// containerd with the CRI plugin:
//   modelfs-cri-client [--address SOCK] [--namespace NS] [--snapshotter NAME] COMMAND
//     pull IMAGE                           CRI PullImage; prints the image ref
//     status IMAGE                         CRI ImageStatus; prints the image ID or "absent"
//     rmi IMAGE                            CRI RemoveImage
//     prepare-mount KEY PARENT TARGET      snapshots Prepare + mount(2) the returned mounts
//     view-mount KEY PARENT TARGET         snapshots View + mount(2)
//     umount TARGET                        unmount everything on TARGET
//     remove KEY                           snapshots Remove
//     stat KEY                             snapshots Stat; prints name, parent, kind, labels
//     pull-read IMAGE PARENT KEY TARGET FILE
//         PullImage, Prepare(KEY, PARENT), mount on TARGET, then read the first byte of
//         TARGET/FILE; prints one JSON line of seconds from the start of the pull:
//         {"pull":..,"prepare":..,"mount":..,"first_byte":..}. Leaves TARGET mounted.
//     run-pod NAME VOLUME READER MOUNTPATH SCRIPT [--log-dir DIR] [--sub-path P]
//         what a kubelet does for a pod with one container mounting an image volume:
//         RunPodSandbox (host network), PullImage of VOLUME and READER with the pod's sandbox
//         config, CreateContainer (READER running `/bin/sh -c SCRIPT`, VOLUME read-only at
//         MOUNTPATH), StartContainer, wait for it to exit; prints its stdout and stderr, then
//         deletes the pod. Exit status: the container's, or 1 when a CRI call fails.
// Exit status: 0 on success, 1 on failure (the reason on stderr).
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "testsupport/cri/cri_client.h"

namespace {

using modelfs::testing::CriImageClient;
using modelfs::testing::MountAll;
using modelfs::testing::SnapshotInfo;
using modelfs::testing::SnapshotsClient;

const char* KindName(SnapshotInfo::Kind k) {
  switch (k) {
    case SnapshotInfo::Kind::kView:
      return "view";
    case SnapshotInfo::Kind::kActive:
      return "active";
    case SnapshotInfo::Kind::kCommitted:
      return "committed";
    default:
      return "unknown";
  }
}

int Fail(const absl::Status& s) {
  fprintf(stderr, "modelfs-cri-client: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"modelfs-cri-client: CRI image pulls and containerd snapshots, step by step"};
  std::string address = "/run/containerd/containerd.sock";
  std::string ns = "k8s.io";
  std::string snapshotter = "modelfs";
  app.add_option("--address", address, "containerd socket")->capture_default_str();
  app.add_option("--namespace", ns, "containerd namespace")->capture_default_str();
  app.add_option("--snapshotter", snapshotter, "snapshotter name")->capture_default_str();
  app.require_subcommand(1);

  std::string image, key, parent, target, file;
  auto* pull = app.add_subcommand("pull", "CRI PullImage");
  pull->add_option("IMAGE", image)->required();
  auto* status = app.add_subcommand("status", "CRI ImageStatus");
  status->add_option("IMAGE", image)->required();
  auto* rmi = app.add_subcommand("rmi", "CRI RemoveImage");
  rmi->add_option("IMAGE", image)->required();
  auto* prepare = app.add_subcommand("prepare-mount", "Prepare and mount");
  prepare->add_option("KEY", key)->required();
  prepare->add_option("PARENT", parent)->required();
  prepare->add_option("TARGET", target)->required();
  auto* view = app.add_subcommand("view-mount", "View and mount");
  view->add_option("KEY", key)->required();
  view->add_option("PARENT", parent)->required();
  view->add_option("TARGET", target)->required();
  auto* umount = app.add_subcommand("umount", "Unmount TARGET");
  umount->add_option("TARGET", target)->required();
  auto* remove = app.add_subcommand("remove", "Remove a snapshot");
  remove->add_option("KEY", key)->required();
  auto* stat = app.add_subcommand("stat", "Stat a snapshot");
  stat->add_option("KEY", key)->required();
  auto* pull_read = app.add_subcommand("pull-read", "Pull, prepare, mount, read a first byte");
  pull_read->add_option("IMAGE", image)->required();
  pull_read->add_option("PARENT", parent)->required();
  pull_read->add_option("KEY", key)->required();
  pull_read->add_option("TARGET", target)->required();
  pull_read->add_option("FILE", file)->required();
  std::string pod_name, volume, reader, mount_path, script, sub_path, log_dir = "/tmp";
  auto* run_pod = app.add_subcommand("run-pod", "A pod whose container mounts an image volume");
  run_pod->add_option("NAME", pod_name)->required();
  run_pod->add_option("VOLUME", volume)->required();
  run_pod->add_option("READER", reader)->required();
  run_pod->add_option("MOUNTPATH", mount_path)->required();
  run_pod->add_option("SCRIPT", script)->required();
  run_pod->add_option("--log-dir", log_dir, "parent of the pod's log directory");
  run_pod->add_option("--sub-path", sub_path,
                      "the volume's subPath (CRI Mount.image_sub_path; containerd 2.2+)");
  CLI11_PARSE(app, argc, argv);

  const std::string grpc_target = "unix://" + address;
  // Kept from containerd's garbage collector like a container's snapshot would be.
  const std::map<std::string, std::string> kGcRoot = {
      {modelfs::testing::kGcRootLabel, "modelfs-cri-client"}};
  if (pull->parsed() || status->parsed() || rmi->parsed()) {
    auto cri = CriImageClient::Connect(grpc_target);
    if (!cri.ok()) return Fail(cri.status());
    if (pull->parsed()) {
      auto ref = (*cri)->PullImage(image);
      if (!ref.ok()) return Fail(ref.status());
      printf("%s\n", ref->c_str());
    } else if (status->parsed()) {
      auto st = (*cri)->ImageStatus(image);
      if (!st.ok()) return Fail(st.status());
      printf("%s\n", st->has_value() ? (*st)->id.c_str() : "absent");
    } else {
      absl::Status s = (*cri)->RemoveImage(image);
      if (!s.ok()) return Fail(s);
    }
    return 0;
  }
  if (run_pod->parsed()) {
    auto cri = CriImageClient::Connect(grpc_target);
    if (!cri.ok()) return Fail(cri.status());
    auto rt = modelfs::testing::CriRuntimeClient::Connect(grpc_target);
    if (!rt.ok()) return Fail(rt.status());
    modelfs::testing::CriPodSpec pod;
    pod.name = pod_name;
    pod.uid = pod_name + "-uid";
    pod.log_directory = absl::StrCat(log_dir, "/", pod_name);
    std::filesystem::create_directories(pod.log_directory);
    auto sandbox = (*rt)->RunPodSandbox(pod);
    if (!sandbox.ok()) return Fail(sandbox.status());
    int rc = 1;
    std::string container;
    [&] {
      auto v = (*cri)->PullImageForPod(volume, pod);
      if (!v.ok()) return (void)Fail(v.status());
      auto r = (*cri)->PullImageForPod(reader, pod);
      if (!r.ok()) return (void)Fail(r.status());
      modelfs::testing::CriContainerSpec c;
      c.name = "reader";
      c.image = *r;
      c.command = {"/bin/sh", "-c", script};
      c.mounts = {{mount_path, "", *v, true, sub_path}};
      c.log_path = "reader.log";
      auto id = (*rt)->CreateContainer(*sandbox, c, pod);
      if (!id.ok()) return (void)Fail(id.status());
      container = *id;
      absl::Status s = (*rt)->StartContainer(*id);
      if (!s.ok()) return (void)Fail(s);
      auto st = (*rt)->WaitForExit(*id, absl::Minutes(10));
      if (!st.ok()) return (void)Fail(st.status());
      std::ifstream in(absl::StrCat(pod.log_directory, "/reader.log"));
      std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      printf("%s", modelfs::testing::ParseCriLog(log).c_str());
      fprintf(stderr, "%s", modelfs::testing::ParseCriLog(log, "stderr").c_str());
      rc = st->exit_code;
    }();
    if (!container.empty()) {
      (void)(*rt)->StopContainer(container, absl::Seconds(5));
      (void)(*rt)->RemoveContainer(container);
    }
    (void)(*rt)->StopPodSandbox(*sandbox);
    (void)(*rt)->RemovePodSandbox(*sandbox);
    return rc;
  }
  if (umount->parsed()) {
    absl::Status s = modelfs::testing::UnmountAll(target);
    return s.ok() ? 0 : Fail(s);
  }

  auto snaps = SnapshotsClient::Connect(grpc_target, snapshotter, ns);
  if (!snaps.ok()) return Fail(snaps.status());
  SnapshotsClient& sc = **snaps;
  if (prepare->parsed() || view->parsed()) {
    auto mounts =
        prepare->parsed() ? sc.Prepare(key, parent, kGcRoot) : sc.View(key, parent, kGcRoot);
    if (!mounts.ok()) return Fail(mounts.status());
    absl::Status s = MountAll(*mounts, target);
    if (!s.ok()) return Fail(s);
    printf("%s\n", modelfs::testing::DescribeMounts(*mounts).c_str());
    return 0;
  }
  if (remove->parsed()) {
    absl::Status s = sc.Remove(key);
    return s.ok() ? 0 : Fail(s);
  }
  if (stat->parsed()) {
    auto info = sc.Stat(key);
    if (!info.ok()) return Fail(info.status());
    printf("name=%s parent=%s kind=%s\n", info->name.c_str(), info->parent.c_str(),
           KindName(info->kind));
    for (const auto& [k, v] : info->labels) printf("label %s=%s\n", k.c_str(), v.c_str());
    return 0;
  }

  // pull-read
  auto cri = CriImageClient::Connect(grpc_target);
  if (!cri.ok()) return Fail(cri.status());
  const absl::Time start = absl::Now();
  auto ref = (*cri)->PullImage(image, absl::Minutes(30));
  if (!ref.ok()) return Fail(ref.status());
  const absl::Time pulled = absl::Now();
  auto mounts = sc.Prepare(key, parent, kGcRoot);
  if (!mounts.ok()) return Fail(mounts.status());
  const absl::Time prepared = absl::Now();
  absl::Status s = MountAll(*mounts, target);
  if (!s.ok()) return Fail(s);
  const absl::Time mounted = absl::Now();
  std::string path = absl::StrCat(target, "/", file);
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return Fail(absl::NotFoundError(absl::StrCat("open ", path)));
  char byte;
  ssize_t n = read(fd, &byte, 1);
  close(fd);
  if (n != 1) return Fail(absl::DataLossError(absl::StrCat("read first byte of ", path)));
  const absl::Time read_done = absl::Now();
  auto secs = [&](absl::Time t) { return absl::ToDoubleSeconds(t - start); };
  printf("%s\n", absl::StrFormat("{\"image_ref\":\"%s\",\"pull\":%.4f,\"prepare\":%.4f,"
                                 "\"mount\":%.4f,\"first_byte\":%.4f}",
                                 *ref, secs(pulled), secs(prepared), secs(mounted), secs(read_done))
                     .c_str());
  return 0;
}
