// What the snapshotter end-to-end tests share:
//  - SnapshotterDaemon: the modelfs-snapshotter binary built with the tests (compile
//    definition MODELFS_SNAPSHOTTER_BIN, or $MODELFS_SNAPSHOTTER_BIN), run with --root,
//    --address and --hosts-dir in a temporary directory and a --config TOML naming the test
//    registry as an insecure (plain HTTP) host and a metrics address on a free loopback port.
//    Ready when its socket accepts connections. Stop() sends SIGTERM and reports the exit
//    status; Restart() starts it again on the same root, socket and port.
//  - PushOrdinaryImage: an ordinary OCI image (uncompressed tar layers, config, manifest)
//    pushed with the project's registry client.
//  - BlobGetsInAccessLog: which blobs a registry's access log says were fetched.
//
// Thread safety: construct and destroy on one thread; const accessors may be used anywhere.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {

struct SnapshotterDaemonOptions {
  std::vector<std::string> insecure_hosts;  // "127.0.0.1:PORT"
  std::string hosts_dir;                    // empty: an empty directory of the fixture's own
  std::string prefetch = "none";            // [cache] prefetch: all | headers | none
  std::string extra_config;                 // TOML appended to the config file ([cache] table)
  std::string top_level_config;             // TOML keys of the top level (lazy_images = [...])
  std::vector<std::string> model_hosts;     // model_hosts (registries V may send the daemon to)
  std::string docker_config;                // empty: a file that does not exist (anonymous)
  std::string policy;                       // policy (containers-policy.json); empty: none
  // containerd_address: the containerd whose content store image volumes naming a plain
  // ModelPack artifact are served from. Empty: none (never the host's own containerd).
  std::string containerd_address;
};

class SnapshotterDaemon {
 public:
  // MODELFS_SNAPSHOTTER_BIN from the environment, else the compile definition.
  static std::string Binary();
  // Why the daemon cannot run here ("" when it can): not root, no /dev/fuse, binary missing.
  static std::string WhyUnavailable();

  // Errors: kDeadlineExceeded (or kFailedPrecondition when it exited) quoting its log.
  static absl::StatusOr<std::unique_ptr<SnapshotterDaemon>> Start(
      SnapshotterDaemonOptions options = {});
  ~SnapshotterDaemon();
  SnapshotterDaemon(const SnapshotterDaemon&) = delete;
  SnapshotterDaemon& operator=(const SnapshotterDaemon&) = delete;

  // SIGTERM and wait (SIGKILL after `grace`); returns the exit status (128 + signal when
  // killed), or -1 when it was not running.
  int Stop(int grace_seconds = 20);
  // Starts the binary again with the same flags (its output appended to log_path()).
  absl::Status Restart();
  bool running();

  const std::string& root() const { return root_; }
  const std::string& socket_path() const { return socket_; }
  const std::string& hosts_dir() const { return hosts_dir_; }
  const std::string& config_path() const { return config_path_; }
  std::string log_path() const { return dir_.Join("snapshotter.log").string(); }
  // "http://127.0.0.1:PORT/metrics"
  std::string metrics_url() const { return "http://" + metrics_address_ + "/metrics"; }
  pid_t pid() const { return pid_; }

 private:
  SnapshotterDaemon() = default;
  absl::Status Spawn(bool append);
  absl::Status WaitReady();

  TempDir dir_;
  std::string root_;
  std::string socket_;
  std::string hosts_dir_;
  std::string config_path_;
  std::string metrics_address_;
  pid_t pid_ = -1;
};

// One file of an ordinary image layer: a regular file with `content` and `mode`, or a
// symbolic link to `symlink_target` when that is set.
struct LayerFile {
  std::string path;
  std::string content;
  uint32_t mode = 0644;
  std::string symlink_target;
};

struct PushedImage {
  std::string reference;  // host:port/repo:tag
  std::string manifest_digest;
  std::string config_digest;
  std::vector<std::string> diff_ids;  // = the layer digests (uncompressed tar layers)
  std::string chain_id;               // of the top layer
};

// Pushes an OCI image (linux/amd64) with one uncompressed tar layer per entry of `layers`;
// `cmd` becomes the config's Cmd (what a container runs when CRI gives no command).
absl::StatusOr<PushedImage> PushOrdinaryImage(const std::string& host_port, const std::string& repo,
                                              const std::string& tag,
                                              const std::vector<std::vector<LayerFile>>& layers,
                                              const std::vector<std::string>& cmd = {});

// The chain ID of a stack of diff IDs (OCI image spec: chainID(L0) = diffID(L0),
// chainID(L0..n) = sha256(chainID(L0..n-1) + " " + diffID(n))).
std::string ChainId(const std::vector<std::string>& diff_ids);

// Blob GETs of `repo` in a registry access log after byte `offset` with HTTP status `status`
// ("200": whole blobs, "206": ranges; empty: any): digest -> number of GETs.
std::map<std::string, int> BlobGetsInAccessLog(const std::string& log, size_t offset,
                                               const std::string& repo,
                                               const std::string& status = "");

// Response bytes of blob GETs of `repo` (any status) after byte `offset`: digest -> bytes.
std::map<std::string, uint64_t> BlobBytesInAccessLog(const std::string& log, size_t offset,
                                                     const std::string& repo);

}  // namespace modelfs::testing
