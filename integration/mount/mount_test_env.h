// What the `modelfs mount` end-to-end tests share: running the modelfs binary under test,
// a mounted model that is always unmounted and whose daemon is always stopped by PID
// (ModelMount), the mount's live counters, /proc/self/mountinfo lookups, and byte-exact reads.
//
// The test process makes itself a child subreaper (BecomeSubreaper) so that the background
// mount daemon, orphaned when `modelfs mount` returns, is reparented to it and can be waited for
// by PID.
//
// Thread safety: free functions keep no state; a ModelMount is used from one thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "testsupport/harness/process_runner.h"

namespace modelfs::testing {

using CommandResult = ProcessResult;

// Runs argv (argv[0] looked up in PATH) with stdin from /dev/null, stdout and stderr captured.
// Errors: kInternal (cannot start), kDeadlineExceeded (killed after `timeout`).
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout = absl::Seconds(120));

// $MODELFS_BIN, else the path compiled in (defined in testsupport/harness/publish_test_env.cc).
std::string ModelfsBinary();

// Makes this process the reaper of its orphaned descendants (prctl PR_SET_CHILD_SUBREAPER).
void BecomeSubreaper();

// One line of /proc/self/mountinfo.
struct MountInfoEntry {
  std::string mount_point;    // unescaped
  std::string mount_options;  // per-mount: "ro,nosuid,nodev,relatime"
  std::string fs_type;        // "fuse.modelfs"
  std::string source;         // "modelfs"
  std::string super_options;  // "ro,user_id=0,group_id=0,default_permissions,allow_other"
};
// The last mount at `dir` (canonical path), or nullopt.
std::optional<MountInfoEntry> FindMount(const std::string& dir);

// Whether the comma-separated option list has `option`.
bool HasOption(const std::string& options, const std::string& option);

struct MountOptions {
  std::string cache_dir;  // required: tests never share the default cache
  std::string prefetch = "none";
  double read_deadline_s = 0;           // 0: the default
  std::string log_file;                 // the daemon's stderr
  bool plain_http = true;               // --plain-http
  std::string hosts_dir;                // --hosts-dir (certs.d with hosts.toml); empty: the default
  std::string docker_config;            // --docker-config; empty: the default
  std::vector<std::string> extra_args;  // more flags, before REF
};

// A model mounted with `modelfs mount` (background mode; --plain-http unless the options say
// otherwise). The destructor runs Unmount().
class ModelMount {
 public:
  // Runs `modelfs mount` and returns once it reports ready. Errors: kFailedPrecondition with
  // the command's exit code and stderr when it fails.
  static absl::StatusOr<std::unique_ptr<ModelMount>> Start(const std::string& ref,
                                                           const std::string& dir,
                                                           const MountOptions& options);
  ~ModelMount();
  ModelMount(const ModelMount&) = delete;
  ModelMount& operator=(const ModelMount&) = delete;

  // `modelfs umount DIR`, then `fusermount3 -u -z DIR` if still mounted; waits for the daemon
  // to exit (SIGKILL after 10 s). Idempotent. Errors: kInternal when the mount stays.
  absl::Status Unmount();

  // `modelfs stats DIR --json`, parsed.
  absl::StatusOr<nlohmann::json> Stats() const;
  // Stats written after this call began (the daemon rewrites its counters about once a second),
  // so every read completed before the call is counted. Errors: kDeadlineExceeded after 10 s.
  absl::StatusOr<nlohmann::json> FreshStats() const;

  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }

 private:
  ModelMount() = default;
  std::string dir_;
  pid_t pid_ = -1;
  bool mounted_ = false;
};

// The whole file, or an error naming it (errno text).
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// pread of exactly `length` bytes (fewer only at end of file). Errors carry the errno text;
// `errno_out` receives the errno of a failed pread (0 on success).
absl::StatusOr<std::string> PreadExact(int fd, uint64_t offset, uint64_t length,
                                       int* errno_out = nullptr);

// "sha256:<hex>" of a buffer.
std::string Sha256Of(const std::string& bytes);

}  // namespace modelfs::testing
