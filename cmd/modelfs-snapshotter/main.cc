// modelfs-snapshotter: the containerd proxy snapshotter daemon. It serves
// containerd.services.snapshots.v1 on a unix socket, mounts models lazily under <root>/mnt and
// exports Prometheus metrics. Everything it does lives in snapshotter/; this file wires flags,
// config, signals, systemd readiness and the gRPC server together.
//
// Exit codes: 0 after SIGTERM/SIGINT, 2 for bad flags or config, 1 when it cannot start.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cmd/modelfs-snapshotter/daemon_config.h"
#include "cmd/modelfs-snapshotter/daemon_log.h"
#include "cmd/modelfs-snapshotter/inherited_listener.h"
#include "cmd/modelfs-snapshotter/metrics.h"
#include "core/base/clock.h"
#include "core/base/heap.h"
#include "core/registry/registry_client.h"
#include "core/status/status_macros.h"
#include "snapshotter/admin/admin_service.h"
#include "snapshotter/model/model_snapshotter.h"
#include "snapshotter/service/snapshots_service.h"

namespace modelfs::snapshotter {
namespace {

namespace fs = std::filesystem;

struct Flags {
  std::string config;
  std::string root;
  std::string address;
  std::string hosts_dir;
  std::string metrics_address;
  std::string log_level;
  bool check_config = false;
  std::string last_good;  // "": none kept (the unit passes kLastGoodConfigPath)
};

// The log before the config is read (logfmt, info, the journal when systemd connected
// stderr to it), and the one the config asks for.
DaemonLog StartupLog() {
  DaemonLogOptions o;
  o.journal = JournalWanted("auto");
  return DaemonLog(o);
}
DaemonLogOptions LogOptionsOf(const DaemonConfig& c) {
  DaemonLogOptions o;
  o.min_level = log::ParseLevel(c.log_level).value_or(log::Level::kInfo);  // validated
  o.format = log::ParseFormat(c.log_format).value_or(log::Format::kLogfmt);
  o.journal = JournalWanted(c.log_journal);
  return o;
}

// The config `text` (read from `source`) with the flags over it, validated. Errors name the
// file, the line and the key (kInvalidArgument).
absl::StatusOr<DaemonConfig> ConfigFrom(const Flags& f, const std::string& text,
                                        const std::string& source) {
  DaemonConfig c;
  RETURN_IF_ERROR(ParseDaemonConfig(text, source, c));
  if (!f.root.empty()) c.root = f.root;
  if (!f.address.empty()) c.address = f.address;
  if (!f.hosts_dir.empty()) c.hosts_dir = f.hosts_dir;
  if (!f.metrics_address.empty()) c.metrics_address = f.metrics_address;
  if (!f.log_level.empty()) c.log_level = f.log_level;
  if (absl::Status st = ValidateDaemonConfig(c); !st.ok()) return WithKeyLine(st, text, source);
  return c;
}

// The config file named by the flags: its path, its text ("" when the default path is absent,
// which means the built-in defaults) and the config it makes with the flags over it.
struct LoadedConfig {
  std::string path;
  std::string text;
  absl::StatusOr<DaemonConfig> config;
};
LoadedConfig LoadConfig(const Flags& f) {
  LoadedConfig out{f.config.empty() ? kDefaultConfigPath : f.config, "",
                   absl::UnknownError("not loaded")};
  absl::StatusOr<std::string> text = ReadDaemonConfigFile(out.path);
  if (text.ok()) {
    out.text = *std::move(text);
  } else if (!absl::IsNotFound(text.status()) || !f.config.empty()) {
    out.config = text.status();
    return out;
  }
  out.config = ConfigFrom(f, out.text, out.path);
  return out;
}

// Keeps `text`, a config the daemon started with, where the next start finds it if the file
// is broken by then: written beside and renamed into place, so a crash leaves the old copy.
void SaveLastGood(const std::string& path, const std::string& text, const DaemonLog& log) {
  if (path.empty()) return;
  const std::string tmp = absl::StrCat(path, ".tmp-", getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out.flush()) {
      log.Write(log::Warn("daemon",
                          "cannot keep the config; a broken config will stop the next "
                          "start")
                    .Field("file", tmp));
      return;
    }
  }
  ::chmod(tmp.c_str(), 0600);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    log.Write(log::Warn("daemon", "cannot keep the config")
                  .Field("file", path)
                  .Field("reason", ec.message()));
  }
}

// The config to start with. A file that does not load is refused, loudly, and the daemon
// starts with the last config it started with instead (kept at f.last_good), so that a typo
// followed by a restart neither loops nor drops the pods whose FUSE connection is in
// systemd's store; with no such copy (a first start) the error is returned (exit 2).
absl::StatusOr<DaemonConfig> BuildConfig(const Flags& f, const DaemonLog& log) {
  LoadedConfig loaded = LoadConfig(f);
  if (loaded.config.ok()) {
    SaveLastGood(f.last_good, loaded.text, log);
    return loaded.config;
  }
  if (f.last_good.empty()) return loaded.config.status();
  absl::StatusOr<std::string> kept = ReadDaemonConfigFile(f.last_good);
  if (!kept.ok()) return loaded.config.status();
  absl::StatusOr<DaemonConfig> last = ConfigFrom(f, *kept, f.last_good);
  if (!last.ok()) return loaded.config.status();
  log.Write(log::Error("daemon", absl::StrCat("config refused; serving with the last config "
                                              "this daemon started with until the file is fixed "
                                              "and the daemon restarted; `modelfs-snapshotter "
                                              "--check-config --config ",
                                              loaded.path, "` checks it"))
                .Field("file", loaded.path)
                .Field("last_good", f.last_good)
                .Field("reason", loaded.config.status().message()));
  return last;
}

// What systemd passes with LISTEN_FDS: the /dev/fuse fd a previous process left in the file
// descriptor store (FDNAME=fuse), and the listening socket of modelfs-snapshotter.socket.
// Anything else passed is closed. -1 where absent.
struct InheritedFds {
  int fuse = -1;
  int listener = -1;
};

InheritedFds TakeInheritedFds(const DaemonLog& log) {
  char** names = nullptr;
  int n = sd_listen_fds_with_names(/*unset_environment=*/1, &names);
  InheritedFds out;
  for (int i = 0; i < n; ++i) {
    int fd = SD_LISTEN_FDS_START + i;
    const bool named_fuse =
        names != nullptr && names[i] != nullptr && std::string(names[i]) == "fuse";
    if (out.fuse < 0 && named_fuse) {
      out.fuse = fd;
    } else if (out.listener < 0 && !named_fuse && IsListeningUnixSocket(fd)) {
      out.listener = fd;
    } else {
      close(fd);
    }
  }
  if (names != nullptr) {
    for (int i = 0; i < n; ++i) free(names[i]);
    free(names);
  }
  if (out.fuse >= 0) {
    log.Write(log::Info("daemon", "inherited the FUSE connection").Field("fd", out.fuse));
  }
  return out;
}

PrefetchPolicy PolicyOf(const std::string& name) {
  if (name == "all") return PrefetchPolicy::kAll;
  if (name == "none") return PrefetchPolicy::kNone;
  return PrefetchPolicy::kHeadersOnly;
}

absl::Status Run(const DaemonConfig& c) {
  const DaemonLog log(LogOptionsOf(c));
  // Signals are taken by sigwait below; block them before any thread starts.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  auto reads = std::make_shared<LatencyHistogram>();
  auto read_errors = std::make_shared<std::atomic<uint64_t>>(0);
  auto passthrough_opens = std::make_shared<std::atomic<uint64_t>>(0);
  // Declared before the snapshotter, whose registry clients report to it: outlives them.
  auto registry_metrics = std::make_shared<RegistryMetrics>();

  ModelSnapshotterOptions o;
  o.root = c.root;
  o.registry.hosts.certs_dir = c.hosts_dir;
  o.registry.hosts.plain_http_hosts = c.insecure_hosts;
  o.registry.docker_config = c.docker_config;
  // An empty docker_config is anonymous: the daemon's environment never picks its credentials.
  o.registry.default_docker_config = false;
  o.registry.credential_provider_config = c.credential_provider_config;
  o.registry.credential_provider_bin_dir = c.credential_provider_bin_dir;
  o.model_hosts = c.model_hosts;
  o.lazy_images = c.lazy_images;
  o.lazy_images_unpack_refused = c.lazy_images_unpack_refused;
  o.policy = c.policy;
  o.require_equivalence = c.require_equivalence;
  o.equivalence_keys = c.equivalence_keys;
  o.cache.max_bytes = c.cache_max_size_gib << 30;
  o.cache.read_deadline = absl::Seconds(c.read_deadline_s);
  o.registry.client.stall_timeout =
      StallTimeoutForReads(o.registry.client.stall_timeout, o.cache.read_deadline);
  o.registry.client.observer = registry_metrics.get();
  o.cache.log = log.sink();
  o.prefetch = PolicyOf(c.prefetch);
  o.insecure_stream = c.insecure_stream;
  o.fuse.allow_other = c.allow_other;
  o.fuse.passthrough = c.passthrough;
  o.fuse.direct_io_reads = c.direct_io;
  o.cache.drop_served_pages = c.drop_served_pages;
  o.cache.audit = c.audit;
  // Validated with the config.
  (void)absl::ParseDuration(c.scrub_interval, &o.cache.scrub_interval);
  (void)absl::ParseDuration(c.persist_delay, &o.cache.persist_delay);
  o.cache.scrub_rate = static_cast<uint64_t>(c.scrub_rate_mib * (1 << 20));
  o.fuse.on_read = [reads, read_errors](absl::Duration d, bool ok) {
    reads->Observe(d);
    if (!ok) read_errors->fetch_add(1, std::memory_order_relaxed);
  };
  o.fuse.on_open = [passthrough_opens](bool passthrough) {
    if (passthrough) passthrough_opens->fetch_add(1, std::memory_order_relaxed);
  };
  o.containerd_address = c.containerd_address;
  o.log = log.sink();
  if (!c.policy.empty()) {
    log.Write(log::Info("policy",
                        "image volumes are mounted only when the signature policy "
                        "accepts them")
                  .Field("file", c.policy));
  }
  if (c.insecure_stream) {
    log.Write(log::Warn("daemon", "fuse.insecure_stream serves bytes before verification"));
  }
  // Before anything is mounted: a bad admin_socket must not cost running pods their mount.
  RETURN_IF_ERROR(CheckAdminSocketPath(AdminSocketPath(c)));
  const InheritedFds inherited = TakeInheritedFds(log);
  o.inherited_fuse_fd = inherited.fuse;

  ASSIGN_OR_RETURN(std::unique_ptr<ModelSnapshotter> snapshotter, ModelSnapshotter::Open(o));
  // Hand the FUSE connection to systemd's file descriptor store (FileDescriptorStoreMax=1 in
  // the unit): after a crash or restart the next process serves the same mount, so containers
  // using models keep working. Without a store, a stop unmounts.
  bool fd_stored = false;
  if (getenv("NOTIFY_SOCKET") != nullptr) {
    int fd = snapshotter->fuse_fd();
    fd_stored = sd_pid_notify_with_fds(0, 0, "FDSTORE=1\nFDNAME=fuse", &fd, 1) > 0;
  }

  std::unique_ptr<MetricsServer> metrics;
  if (!c.metrics_address.empty()) {
    ASSIGN_OR_RETURN(auto hp, SplitHostPort(c.metrics_address));
    ModelSnapshotter* s = snapshotter.get();
    ASSIGN_OR_RETURN(
        metrics, MetricsServer::Start(hp.first, hp.second,
                                      [s, reads, read_errors, passthrough_opens, registry_metrics,
                                       max_bytes = c.cache_max_size_gib << 30] {
                                        DaemonCounters counters;
                                        counters.cache = s->cache_stats();
                                        RemotePrepareCounts r = s->remote_counts();
                                        counters.remote_mounted = r.mounted;
                                        counters.remote_fallback = r.fallback;
                                        counters.remote_error = r.error;
                                        counters.policy_refusals = s->policy_refusals();
                                        counters.equivalence_refusals = s->equivalence_refusals();
                                        counters.policy_evaluations = s->policy_evaluations();
                                        counters.active_models = s->ActiveModels().size();
                                        counters.read_errors = read_errors->load();
                                        counters.passthrough_opens = passthrough_opens->load();
                                        counters.cache_max_bytes = max_bytes;
                                        counters.disk_full = s->cache_disk_full();
                                        counters.version = MODELFS_VERSION;
                                        counters.commit = MODELFS_COMMIT;
                                        counters.registry = registry_metrics->Snapshot();
                                        return RenderPrometheus(counters, *reads);
                                      }));
    log.Write(log::Info("daemon", "metrics served")
                  .Field("url", absl::StrCat("http://", c.metrics_address, "/metrics")));
  }

  // The admin socket `modelfs node` talks to (root only): a path that is another file stops
  // the start (exit 2), so that a typo in admin_socket never removes someone's file.
  ASSIGN_OR_RETURN(std::unique_ptr<AdminServer> admin,
                   AdminServer::Start(AdminSocketPath(c), snapshotter.get()));
  log.Write(log::Info("daemon", "admin service").Field("socket", admin->path()));

  std::error_code ec;
  SnapshotsService service(snapshotter.get());
  // The service escapes every caller string in its call lines itself (and quotes them).
  if (log.Enabled(log::Level::kDebug)) {
    service.set_call_log(
        [&log](const std::string& line) { log.Write(log::Debug("service", line)); });
  }
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<InheritedListener> listener;
  if (inherited.listener >= 0) {
    // Socket activation: systemd owns the socket and its path, and keeps both across restarts.
    server = builder.BuildAndStart();
    if (!server) return absl::UnavailableError("cannot start the gRPC server");
    ASSIGN_OR_RETURN(listener, InheritedListener::Start(inherited.listener, server.get()));
    log.Write(log::Info("daemon", "serving snapshots on the socket systemd passed")
                  .Field("fd", inherited.listener)
                  .Field("models", snapshotter->mount_dir().string()));
  } else {
    fs::create_directories(fs::path(c.address).parent_path(), ec);
    // A socket file left by a previous run would make bind fail.
    if (fs::is_socket(c.address, ec)) fs::remove(c.address, ec);
    builder.AddListeningPort(absl::StrCat("unix:", c.address), grpc::InsecureServerCredentials());
    server = builder.BuildAndStart();
    if (!server) {
      return absl::UnavailableError(absl::StrCat("cannot listen on unix socket ", c.address));
    }
    // Only root (containerd) may talk to the snapshotter.
    ::chmod(c.address.c_str(), 0600);
    log.Write(log::Info("daemon", "serving snapshots")
                  .Field("address", c.address)
                  .Field("models", snapshotter->mount_dir().string()));
  }
  sd_notify(0, "READY=1\nSTATUS=serving snapshots");

  int sig = 0;
  sigwait(&sigs, &sig);
  log.Write(log::Info("daemon", "stopping").Field("signal", sig));
  sd_notify(0, "STOPPING=1");
  // Connections not yet accepted stay in the socket's queue for the next process.
  listener.reset();
  server->Shutdown(absl::ToChronoTime(Clock::Real()->Now() + absl::Seconds(1)));
  server.reset();
  admin.reset();
  metrics.reset();
  // With the fd in the store, leave the mount for the next process (if the unit is stopped
  // for good, systemd closes the stored fd and the next start clears the stale mount).
  absl::Status st = snapshotter->Shutdown(/*keep_mount=*/fd_stored);
  if (!st.ok()) log.Write(log::Warn("daemon", "shutdown").Field("reason", st.ToString()));
  if (inherited.listener < 0) fs::remove(c.address, ec);
  return absl::OkStatus();
}

}  // namespace
}  // namespace modelfs::snapshotter

int main(int argc, char** argv) {
  modelfs::BoundHeapGrowth();
  using namespace modelfs::snapshotter;
  CLI::App app{
      "modelfs-snapshotter: containerd proxy snapshotter that mounts model weights lazily "
      "from OCI registries, verifying every byte.\nExit codes: 0 stopped by a signal, 1 could "
      "not start, 2 bad flags or config."};
  Flags f;
  app.add_option("--config", f.config,
                 absl::StrCat("TOML config file (default ", kDefaultConfigPath, " when present)"));
  app.add_option("--root", f.root, "State directory (default /var/lib/modelfs)");
  app.add_option("--address", f.address,
                 "gRPC unix socket for containerd (default /run/modelfs/snapshotter.sock)");
  app.add_option("--hosts-dir", f.hosts_dir,
                 "containerd-style certs.d directory (default /etc/containerd/certs.d)");
  app.add_option("--metrics-address", f.metrics_address,
                 "host:port for Prometheus /metrics (default: off)");
  app.add_option("--log-level", f.log_level, "debug, info, warn or error (overrides log_level)");
  app.add_flag("--check-config", f.check_config,
               "Parse and validate the config (with the flags over it), print the effective "
               "config and exit: 0 valid, 2 not (the file, line and key named)");
  app.add_option("--last-good-config", f.last_good,
                 absl::StrCat("Keep a copy of the config the daemon started with here, and start "
                              "with it when the file is broken at the next start (the unit: ",
                              kLastGoodConfigPath, "; default: none, a broken file exits 2)"));
  app.set_version_flag("--version", std::string("modelfs-snapshotter ") + MODELFS_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (f.check_config) {
    LoadedConfig checked = LoadConfig(f);
    if (!checked.config.ok()) {
      fprintf(stderr, "modelfs-snapshotter: %s\n",
              std::string(checked.config.status().message()).c_str());
      return 2;
    }
    printf("# %s: valid; the effective config (defaults and flags included):\n%s",
           checked.path.c_str(), RenderDaemonConfig(*checked.config).c_str());
    return 0;
  }
  absl::StatusOr<DaemonConfig> config = BuildConfig(f, StartupLog());
  if (!config.ok()) {
    fprintf(stderr, "modelfs-snapshotter: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  absl::Status st = Run(*config);
  if (!st.ok()) {
    fprintf(stderr, "modelfs-snapshotter: %s\n", st.ToString().c_str());
    return absl::IsInvalidArgument(st) ? 2 : 1;
  }
  return 0;
}
