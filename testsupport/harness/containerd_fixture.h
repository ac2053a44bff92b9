// Containerd: a real containerd of the test's own (root, state, opt, sockets and a
// containerd-style certs.d hosts directory in a temporary directory), optionally with a proxy
// snapshot plugin (the modelfs snapshotter) and with or without the CRI plugin. The CRI plugin
// serves runtime.v1 on the same socket; with it the default namespace is "k8s.io", as under a
// kubelet. Started and stopped by PID; the destructor detaches every mount left under the
// directory (before and after stopping the daemon) so a failed test leaves nothing mounted,
// and (2.x) first kills the pods a failed test left running: their containers in the
// fixture's own runc root, and their shims (found by the fixture's socket on their command
// line; shims outlive containerd by design).
//
// Two versions: Debian's containerd 1.6 (config version 2; CRI image service only, no pods),
// or a containerd 2.x release directory (ContainerdOptions::release_dir, containerd_release.h)
// with a version 3 config that runs pods: runc (Debian's), the release's own shim (its
// directory first on PATH), host-network sandboxes without CNI, a pinned sandbox image, and
// the proxy snapshotter as CRI's snapshotter for images, the runc handler (image volumes) and
// the transfer service's unpack, with remote-snapshot annotations exported, as docs/install.md
// configures a node. NRI is disabled (it would open a socket under /var/run), and runc's state
// lives under the fixture too.
//
// Thread safety: construct and destroy on one thread; Ctr() may be called from several threads
// (each call runs its own `ctr` process).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "testsupport/harness/process_runner.h"
#include "testsupport/harness/registry_fixture.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {

inline constexpr char kContainerdBinary[] = "/usr/bin/containerd";
inline constexpr char kCtrBinary[] = "/usr/bin/ctr";
// Debian's runc (package runc, a dependency of containerd): the runtime of containerd 2.x pods.
inline constexpr char kRuncBinary[] = "/usr/sbin/runc";

struct ContainerdOptions {
  // "127.0.0.1:PORT": writes certs.d/<host:port>/hosts.toml for plain HTTP (pull, resolve).
  // Empty: an empty hosts directory.
  std::string registry_host_port;
  // A proxy snapshot plugin `[proxy_plugins.<name>]` at this unix socket; empty: none.
  std::string proxy_snapshotter_name = "modelfs";
  std::string proxy_snapshotter_address;
  // The CRI plugin (runtime.v1 on the containerd socket) pulling into `cri_snapshotter` with
  // snapshot annotations passed to the snapshotter. Disabled when false.
  bool cri = false;
  std::string cri_snapshotter = "overlayfs";
  // The namespace Ctr() uses; empty: "k8s.io" with CRI, "modelfs-e2e" without.
  std::string ns;
  // A containerd 2.x release directory (containerd, ctr, containerd-shim-runc-v2); empty:
  // Debian's containerd 1.6 from /usr/bin.
  std::string release_dir;
  // 2.x: the config's `version`: 3 (2.0 to 2.2), or 4 (2.3: the modelfs tables are those of 3,
  // the daemon's socket addresses move to the io.containerd.server.v1 plugins;
  // ContainerdRelease::config_version).
  int config_version = 3;
  // 2.x with CRI: the sandbox (pause) image, pinned so the image GC keeps it.
  std::string sandbox_image;
  // The gRPC socket; empty: containerd.sock in the fixture's directory. Set it to hand the
  // path to a client configured before containerd starts (the modelfs snapshotter).
  std::string socket_path;
};

class Containerd {
 public:
  // Why this machine cannot run containerd for a test ("" when it can): not root, containerd
  // or ctr missing, no overlay filesystem; with a `release_dir`, its binaries or runc missing.
  static std::string WhyUnavailable(const std::string& release_dir = "");

  // Writes config.toml, starts containerd and waits until `ctr version` answers (and, with
  // CRI, until the CRI plugin reports loaded). Errors: kDeadlineExceeded quoting the log.
  static absl::StatusOr<std::unique_ptr<Containerd>> Start(ContainerdOptions options);
  ~Containerd();
  Containerd(const Containerd&) = delete;
  Containerd& operator=(const Containerd&) = delete;

  // Runs `ctr --address <socket> --namespace <ns> args...`.
  absl::StatusOr<ProcessResult> Ctr(const std::vector<std::string>& args,
                                    absl::Duration timeout = absl::Seconds(120)) const;

  // Stops the daemon (SIGTERM, then SIGKILL). Idempotent.
  void Stop();

  // Stops the daemon and starts the containerd of `release_dir` (another 2.x release) on the
  // same config, root, state and sockets, its log appended: what an admin does upgrading a
  // node's containerd in place. Running pods keep running (their shims outlive containerd).
  // Errors: kInvalidArgument unless both releases are 2.x; as Start otherwise.
  absl::Status Restart(const std::string& release_dir);

  const std::string& socket_path() const { return socket_; }
  // "unix:///..." for gRPC clients.
  std::string grpc_target() const { return "unix://" + socket_; }
  const std::string& hosts_dir() const { return hosts_dir_; }
  const std::string& ns() const { return ns_; }
  pid_t pid() const { return process_ ? process_->pid() : -1; }
  // The CRI pods' state (sandbox files, container logs default) under the fixture.
  std::string dir() const { return dir_.path().string(); }
  std::string log_path() const { return dir_.Join("containerd.log").string(); }
  std::string root_dir() const { return dir_.Join("root").string(); }
  // An empty directory under the fixture for `ctr images mount` and the like (created).
  std::string MountPoint(const std::string& name = "mnt") const;
  const ContainerdOptions& options() const { return options_; }

 private:
  Containerd() = default;
  // Starts the binary of options_.release_dir (or 1.6) on config_path_ and waits until it (and
  // CRI, when configured) answers.
  absl::Status SpawnAndWait(bool append_log);
  void KillLeftoverPods();
  ContainerdOptions options_;
  TempDir dir_;
  std::string socket_;
  std::string hosts_dir_;
  std::string ns_;
  std::string ctr_binary_;
  std::string config_path_;
  std::unique_ptr<ChildProcess> process_;
};

// Mount points at or below `dir` (from /proc/self/mountinfo), deepest first.
std::vector<std::string> MountsUnder(const std::string& dir);

// umount2(MNT_DETACH) every mount at or below `dir`, deepest first.
void DetachMountsUnder(const std::string& dir);

}  // namespace modelfs::testing
