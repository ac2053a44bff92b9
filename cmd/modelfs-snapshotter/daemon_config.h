// DaemonConfig: modelfs-snapshotter's settings, from /etc/modelfs/snapshotter.toml and flags.
// Every key is optional; unknown keys are refused so that a typo does not silently keep a
// default. The reference is docs/snapshotter.md.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace modelfs::snapshotter {

inline constexpr char kDefaultConfigPath[] = "/etc/modelfs/snapshotter.toml";
// Where the unit has the daemon keep a copy of the last config it started with
// (--last-good-config): its RuntimeDirectory, kept across restarts of the unit, gone at
// reboot, when no pod is left to keep reading.
inline constexpr char kLastGoodConfigPath[] = "/run/modelfs/snapshotter.last-good.toml";

struct DaemonConfig {
  std::string root = "/var/lib/modelfs";
  std::string address = "/run/modelfs/snapshotter.sock";
  std::string hosts_dir = "/etc/containerd/certs.d";
  std::vector<std::string> insecure_hosts;  // plain HTTP to exactly these registries
  // Where a volume image may send the daemon for its model besides its own repository:
  // "host[:port]" (any repository there), "host[:port]/repo" or "host[:port]/prefix/*"
  // (model_hosts.h). Empty: only the volume image's own repository.
  std::vector<std::string> model_hosts;
  // Ordinary images (a KServe modelcar) whose top layer is served lazily when a modelfs volume
  // image is among their referrers: entries of the model_hosts forms. Empty (default): none.
  std::vector<std::string> lazy_images;
  // With a policy, a listed image the policy refuses fails its pull (false, the default), or
  // is unpacked eagerly as without modelfs (true).
  // ModelSnapshotterOptions::lazy_images_unpack_refused.
  bool lazy_images_unpack_refused = false;
  // A docker config.json with credentials; empty: none (anonymous), never $DOCKER_CONFIG or
  // ~/.docker, which would make what the daemon sends depend on its environment.
  std::string docker_config;
  // Repositories (model_hosts forms) whose volume images must carry a signed equivalence
  // attestation, and the PEM public keys one must verify with (absolute paths).
  // ModelSnapshotterOptions::require_equivalence. Empty: none required.
  std::vector<std::string> require_equivalence;
  std::vector<std::string> equivalence_keys;
  // Credentials (docs/snapshotter.md, "Credentials"): a kubelet CredentialProviderConfig (JSON)
  // and the directory of its plugins, both or neither; empty (default): no plugins.
  std::string credential_provider_config;
  std::string credential_provider_bin_dir;
  // containers-policy.json that image volumes must satisfy (signatures); empty: no policy.
  std::string policy;
  std::string metrics_address;        // "host:port"; empty: no metrics endpoint
  std::string log_level = "info";     // debug | info | warn | error: the least level logged
  std::string log_format = "logfmt";  // logfmt | json (log_event.h)
  // Structured journald fields (sd_journal_send) in place of stderr lines: auto (when
  // JOURNAL_STREAM is set, i.e. systemd connected stderr to the journal) | on | off.
  std::string log_journal = "auto";
  // containerd's gRPC socket, for its content API (image volumes naming a plain ModelPack
  // artifact); empty: not used.
  std::string containerd_address = "/run/containerd/containerd.sock";
  // The admin socket `modelfs node` talks to (snapshotter/admin): "" means <root>/admin.sock.
  // Mode 0600 in a 0700 directory; the daemon refuses to start when the path is another file.
  std::string admin_socket;

  uint64_t cache_max_size_gib = 0;   // 0: unbounded
  std::string prefetch = "headers";  // all | headers | none
  double read_deadline_s = 30;
  // CacheOptions::drop_served_pages. Off: the cache file's pages are the one copy a later pod
  // reads (by passthrough) at page-cache speed, as a local disk's would be.
  bool drop_served_pages = false;
  bool audit = true;  // CacheOptions::audit
  // CacheOptions::scrub_interval as absl::ParseDuration reads it ("24h", "90m"; "0": off) and
  // scrub_rate in MiB a second.
  std::string scrub_interval = "24h";
  double scrub_rate_mib = 32;
  // CacheOptions::persist_delay, the same way ("30s"; "0": flush after every fetch).
  std::string persist_delay = "30s";

  bool allow_other = true;
  bool insecure_stream = false;
  bool passthrough = true;  // FuseMountOptions::passthrough
  bool direct_io = true;    // FuseMountOptions::direct_io_reads
};

// Parses TOML text into `config` (keys absent from the text keep their values). `source` names
// the file in errors. Errors: kInvalidArgument naming the file and key.
absl::Status ParseDaemonConfig(const std::string& text, const std::string& source,
                               DaemonConfig& config);

// The text of the config file at `path` (ParseDaemonConfig reads it). A missing file is
// kNotFound (the daemon ignores that for the default path only).
absl::StatusOr<std::string> ReadDaemonConfigFile(const std::string& path);

// Checks values that parsing alone cannot: prefetch and log_level names, a positive read
// deadline, absolute paths (root, address, policy), a "host:port" metrics address, model_hosts
// entries of the forms model_hosts.h lists (no scheme or spaces). Errors: kInvalidArgument.
absl::Status ValidateDaemonConfig(const DaemonConfig& config);

// Every key the parser reads, tables' keys as "cache.max_size_gib" (the packaged
// snapshotter.toml must list each; daemon_config_test checks it).
std::vector<std::string> DaemonConfigKeys();

// `config` as TOML that ParseDaemonConfig reads back to the same values: every key, tables
// last (what `modelfs-snapshotter --check-config` prints as the effective config).
std::string RenderDaemonConfig(const DaemonConfig& config);

// An error of ValidateDaemonConfig, which names its key first, with the line of that key in
// `text` (the file `source` holds) in front: "FILE:LINE: message". The error unchanged when
// the key is not in the text (a default or a flag is at fault) or the text does not parse.
absl::Status WithKeyLine(const absl::Status& error, const std::string& text,
                         const std::string& source);

// The admin socket's path: admin_socket, or <root>/admin.sock when that is "".
std::string AdminSocketPath(const DaemonConfig& config);

// "host:port" -> (host, port). Errors: kInvalidArgument.
absl::StatusOr<std::pair<std::string, uint16_t>> SplitHostPort(const std::string& address);

}  // namespace modelfs::snapshotter
