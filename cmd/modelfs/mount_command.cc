// `modelfs mount REF DIR`, `modelfs umount DIR` and `modelfs stats DIR`: a lazy, verified FUSE
// mount of one model. Without --foreground the command re-executes itself in the background
// and returns once the mount is ready (or with the error that stopped it).
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "cmd/modelfs/cli.h"
#include "core/cache/blob_cache.h"
#include "core/cache/decoding_blob_source.h"
#include "core/registry/registry_client.h"
#include "core/resolve/model_ref.h"
#include "core/status/status_macros.h"
#include "fuse/fuse_adapter.h"
#include "fuse/stale_mount.h"
#include "host/model_host.h"
#include "host/model_mounter.h"
#include "nlohmann/json.hpp"

namespace modelfs::cli {
namespace {

namespace fs = std::filesystem;

struct MountCli {
  bool plain_http = false;
  std::string hosts_dir = "/etc/containerd/certs.d";
  std::string docker_config;
  std::string cache_dir;
  bool foreground = false;
  bool insecure_stream = false;
  std::string prefetch = "headers";
  double read_deadline_s = 30;
  uint64_t cache_max_mib = 0;
  bool passthrough = true;
  bool direct_io = true;
  bool drop_served_pages = false;
  bool audit = true;
  std::string scrub_interval = "24h";
  std::string persist_delay = "30s";
  double scrub_rate_mib = 32;
  std::string log_file;
  std::string policy;
  int ready_fd = -1;  // internal: set when re-executed in the background
  std::string ref;
  std::string dir;
  std::string state_ref;  // --state: a state of REF's model, shown under kStateDir
};

// Where `mount MODEL --state STATE DIR` shows the state's files (and its .modelinfo.json).
constexpr char kStateDir[] = ".state";

// The state `state_ref` names, resolved and verified, which must be a state of `model` kept in
// its repository. A state of another model is refused as bad input (exit 2): both artifacts
// may be sound, but loading the one with the other is not (llama.cpp may crash on it).
absl::StatusOr<ResolvedModel> ResolveStateFor(const MountCli& c, RegistryClients& clients,
                                              const ResolvedModel& model) {
  if (model.state) {
    return absl::InvalidArgumentError(absl::StrCat(
        c.ref, " is a state, not a model: `mount MODEL --state STATE DIR` takes the model first"));
  }
  ASSIGN_OR_RETURN(ImageReference ref, ImageReference::Parse(c.state_ref));
  ASSIGN_OR_RETURN(std::shared_ptr<RegistryClient> client, clients.For(ref.registry()));
  ASSIGN_OR_RETURN(ref, EnforcePolicyFlag(c.policy, *client, ref));
  ASSIGN_OR_RETURN(ResolvedModel state,
                   ResolveModel(*client, ref, clients.Connector(), NotingLocation(ref)));
  if (!state.state) {
    return absl::InvalidArgumentError(
        absl::StrCat("--state ", c.state_ref, " is a model (", state.model_descriptor.digest.str(),
                     "), not a state (artifactType ", std::string(kStateArtifactType), ")"));
  }
  if (state.state->model.digest != model.model_descriptor.digest) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--state ", c.state_ref, " (", state.model_descriptor.digest.str(),
        ") is a state of model ", state.state->model.digest.str(), ", not of ", c.ref, " (",
        model.model_descriptor.digest.str(), "); refusing to mount them together"));
  }
  if (state.registry != model.registry || state.repository != model.repository) {
    return absl::InvalidArgumentError(
        absl::StrCat("--state ", c.state_ref, " lives in ", state.registry, "/", state.repository,
                     ", not in its model's repository ", model.registry, "/", model.repository));
  }
  return state;
}

std::string DefaultCacheDir() {
  if (geteuid() == 0) return "/var/lib/modelfs/cache";
  const char* home = getenv("HOME");
  return absl::StrCat(home ? home : "/tmp", "/.cache/modelfs");
}

std::string StatsDir() {
  if (geteuid() == 0) return "/run/modelfs/mounts";
  const char* rt = getenv("XDG_RUNTIME_DIR");
  return absl::StrCat(rt ? rt : "/tmp", "/modelfs-mounts");
}

std::string StatsPath(const std::string& dir) {
  std::error_code ec;
  std::string abs = fs::weakly_canonical(dir, ec).string();
  if (ec || abs.empty()) abs = dir;
  return absl::StrCat(StatsDir(), "/", absl::StrReplaceAll(abs, {{"/", "_"}}), ".json");
}

// Opens the kernel took, and those of them served by FUSE passthrough (the kernel reads the
// sealed cache file itself), since the mount started.
struct OpenCounts {
  std::atomic<uint64_t> opens{0};
  std::atomic<uint64_t> passthrough{0};
};

// `modelfs stats` sends this to a mount for counters taken after its request, so that a
// refusal the caller has just seen is in them (the file is otherwise rewritten every second).
constexpr int kStatsRefreshSignal = SIGUSR1;

nlohmann::json StatsJson(const BlobCache& cache, const DecodingBlobSource& decoding,
                         const std::string& ref, const std::string& dir, const LoadedModel& m,
                         const OpenCounts& opens) {
  // Taken before the counters: a reader that asked at time T knows these are from after T.
  const int64_t taken_ns = absl::GetCurrentTimeNanos();
  CacheStats s = cache.stats();
  const DecodingBlobSource::Stats d = decoding.stats();
  nlohmann::json j = {{"reference", ref},
                      {"mountpoint", dir},
                      {"pid", getpid()},
                      {"taken_ns", taken_ns},
                      {"verification", m.verification},
                      {"bytes_fetched", s.bytes_fetched},
                      {"requests", s.requests},
                      {"cache_hits", s.chunk_hits},
                      {"cache_misses", s.chunk_misses},
                      {"verification_failures", s.verification_failures},
                      {"refetch_recoveries", s.refetch_recoveries},
                      {"quarantined_layers", s.quarantined_layers},
                      {"bytes_served", s.bytes_served},
                      {"page_cache_bytes_dropped", s.page_cache_bytes_dropped},
                      {"sealed_layers", s.sealed_layers},
                      {"audited_layers", s.audited_layers},
                      {"scrubbed_bytes", s.scrubbed_bytes},
                      {"scrub_failures", s.scrub_failures},
                      {"scrub_repairs", s.scrub_repairs},
                      {"fs_verity", s.fs_verity},
                      {"cached_bytes", s.cached_bytes},
                      {"opens", opens.opens.load()},
                      {"passthrough_opens", opens.passthrough.load()},
                      // Per layer of M: how it is served (LoadedModel::layer_serving), e.g.
                      // "lazy-seek-index" or "decoded-whole" for a compressed layer.
                      {"layers", m.layer_serving},
                      {"decoded_spans", d.ranges},
                      {"compressed_bytes_fetched", d.compressed_bytes},
                      {"decoded_bytes", d.decoded_bytes},
                      {"lead_in_bytes", d.lead_in_bytes},
                      {"seek_windows_fetched", d.windows_fetched},
                      {"seek_window_bytes", d.window_bytes}};
  if (m.image) {
    const ImageTreeCounts& c = m.image_counts;
    j["image_tree"] = {{"whiteouts", c.whiteouts},
                       {"ignored_whiteouts", c.ignored_whiteouts},
                       {"opaque_dirs", c.opaque_dirs},
                       {"hardlinks", c.hardlinks},
                       {"skipped_special", c.skipped_special}};
  }
  return j;
}

void WriteAtomically(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text << "\n";
  }
  rename(tmp.c_str(), path.c_str());
}

void Report(int fd, const absl::Status& st) {
  if (fd < 0) return;
  std::string msg = st.ok() ? "OK\n"
                            : absl::StrCat("ERR ", static_cast<int>(st.code()), " ",
                                           std::string(st.message()), "\n");
  (void)!write(fd, msg.data(), msg.size());
  close(fd);
}

// Runs the mount in this process until it is unmounted or signalled.
absl::Status RunForeground(const MountCli& c) {
  // Signals go to a dedicated thread, so block them before any thread starts.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGHUP);
  sigaddset(&sigs, kStatsRefreshSignal);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  PrefetchPolicy policy;
  if (c.prefetch == "all")
    policy = PrefetchPolicy::kAll;
  else if (c.prefetch == "headers")
    policy = PrefetchPolicy::kHeadersOnly;
  else if (c.prefetch == "none")
    policy = PrefetchPolicy::kNone;
  else
    return absl::InvalidArgumentError("--prefetch must be all, headers or none");
  if (c.read_deadline_s <= 0) return absl::InvalidArgumentError("--read-deadline must be > 0");
  // A previous mount here whose process died answers ENOTCONN: clear it, or this mount would
  // stack on it and the dead one would outlive `umount`.
  RETURN_IF_ERROR(DetachStaleMount(c.dir));
  if (FuseMountedAt(c.dir)) {
    // A live one: a second mount would hide it (and its readers' files) until unmounted.
    return absl::InvalidArgumentError(absl::StrCat(
        c.dir, ": a FUSE filesystem is already mounted here; `modelfs umount ", c.dir, "` first"));
  }
  std::error_code ec;
  if (!fs::is_directory(c.dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(c.dir, ": mount point is not a directory"));
  }

  ASSIGN_OR_RETURN(ImageReference ref, ImageReference::Parse(c.ref));
  RegistryAccessOptions access;
  access.hosts.plain_http = c.plain_http;
  access.hosts.certs_dir = c.hosts_dir;
  access.docker_config = c.docker_config;
  access.client.stall_timeout =
      StallTimeoutForReads(access.client.stall_timeout, absl::Seconds(c.read_deadline_s));
  // One client per registry: V's record may name M's repository on another registry, and
  // the weights are read from there. The host keeps this map once the model is resolved.
  auto clients = std::make_unique<RegistryClients>(access);
  ASSIGN_OR_RETURN(std::shared_ptr<RegistryClient> client, clients->For(ref.registry()));
  // Before anything is fetched, cached or mounted: the signature on what REF names (for a
  // volume image V, V's, which covers M's digest and the chunk indexes); then only that digest.
  ASSIGN_OR_RETURN(ref, EnforcePolicyFlag(c.policy, *client, ref));
  ASSIGN_OR_RETURN(ResolvedModel rm,
                   ResolveModel(*client, ref, clients->Connector(), NotingLocation(ref)));
  std::optional<ResolvedModel> state;
  if (!c.state_ref.empty()) {
    ASSIGN_OR_RETURN(state, ResolveStateFor(c, *clients, rm));
  }
  // M's registry is reached before the cache is opened (the host reads M's layers through it).
  RETURN_IF_ERROR(clients->For(rm.registry).status());

  // The host: the model's layers are routed to its registry (through the clients it was
  // resolved with); compressed layers with a seek index in V are decoded span by span from there.
  ModelHostConfig hc;
  hc.clients = std::move(clients);
  CacheOptions& co = hc.cache;
  co.dir = c.cache_dir.empty() ? DefaultCacheDir() : c.cache_dir;
  co.read_deadline = absl::Seconds(c.read_deadline_s);
  co.max_bytes = c.cache_max_mib << 20;
  co.drop_served_pages = c.drop_served_pages;
  co.audit = c.audit;
  if (!absl::ParseDuration(c.scrub_interval, &co.scrub_interval) ||
      co.scrub_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("--scrub-interval \"", c.scrub_interval,
                                                   "\": want a duration such as 24h or 90m, or 0"));
  }
  if (!(c.scrub_rate_mib > 0)) return absl::InvalidArgumentError("--scrub-rate-mib must be > 0");
  if (!absl::ParseDuration(c.persist_delay, &co.persist_delay) ||
      co.persist_delay < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("--persist-delay \"", c.persist_delay,
                                                   "\": want a duration such as 30s, or 0"));
  }
  co.scrub_rate = static_cast<uint64_t>(c.scrub_rate_mib * (1 << 20));
  // One logfmt line per event; the encoder escapes what registries and artifacts chose.
  co.log = log::WriteToStderr;
  hc.options.prefetch = policy;
  hc.options.insecure_stream = c.insecure_stream;
  OpenCounts opens;  // outlives the host's mount, whose on_open counts into it
  absl::StatusOr<std::unique_ptr<ModelHost>> opened = ModelHost::Open(std::move(hc));
  // A cache directory another process holds (as root, by default the daemon's) is a usage
  // error: exit 2, and the message names the directory and its holder.
  if (absl::IsFailedPrecondition(opened.status())) {
    return absl::InvalidArgumentError(opened.status().message());
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ModelHost> host, std::move(opened));
  // --state: the state's files (and its own .modelinfo.json) go under kStateDir of the model's
  // tree; both are served from the one cache, each layer verified against its own chunk index.
  std::optional<ModelHost::NestedModel> nested;
  if (state) {
    ASSIGN_OR_RETURN(LoadedModel state_loaded, host->Load(*state, c.state_ref));
    nested = ModelHost::NestedModel{kStateDir, std::move(state_loaded)};
  }
  // The model is the root of its own tree, served by a mount of its own.
  FuseMountOptions fo;
  fo.on_open = [&opens](bool passthrough) {
    opens.opens.fetch_add(1, std::memory_order_relaxed);
    if (passthrough) opens.passthrough.fetch_add(1, std::memory_order_relaxed);
  };
  fo.passthrough = c.passthrough;
  fo.direct_io_reads = c.direct_io;
  ASSIGN_OR_RETURN(LoadedModel loaded,
                   host->MountModel(c.dir, fo, rm, c.ref, nested ? &*nested : nullptr));
  const BlobCache& cache = host->cache();
  const DecodingBlobSource& source = *host->decoding();

  fs::create_directories(StatsDir(), ec);
  const std::string stats_path = StatsPath(c.dir);
  WriteAtomically(stats_path, StatsJson(cache, source, c.ref, c.dir, loaded, opens).dump());
  Report(c.ready_fd, absl::OkStatus());
  if (c.ready_fd < 0) {
    printf("mounted %s at %s (%s verification); Ctrl-C or `modelfs umount %s` to stop\n",
           c.ref.c_str(), c.dir.c_str(), loaded.verification.c_str(), c.dir.c_str());
    fflush(stdout);
  }

  std::atomic<bool> stopping{false};
  // The stats writer's wake-ups: a refresh asked for by `modelfs stats`, or the end.
  struct StatsWake {
    absl::Mutex mu;
    bool refresh ABSL_GUARDED_BY(mu) = false;
    bool stop ABSL_GUARDED_BY(mu) = false;
  } wake;
  std::thread signals([&] {
    int sig = 0;
    while (sigwait(&sigs, &sig) == 0 && sig == kStatsRefreshSignal) {
      absl::MutexLock lock(&wake.mu);
      wake.refresh = true;
    }
    if (!stopping.exchange(true)) (void)host->Unmount();
  });
  std::thread stats([&] {
    while (true) {
      {
        absl::MutexLock lock(&wake.mu);
        auto woken = [&wake]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(wake.mu) {
          return wake.refresh || wake.stop;
        };
        wake.mu.AwaitWithTimeout(absl::Condition(&woken), absl::Seconds(1));
        if (wake.stop) return;
        wake.refresh = false;
      }
      WriteAtomically(stats_path, StatsJson(cache, source, c.ref, c.dir, loaded, opens).dump());
    }
  });
  absl::Status waited = host->Wait();
  if (!stopping.exchange(true)) pthread_kill(signals.native_handle(), SIGTERM);
  signals.join();
  {
    absl::MutexLock lock(&wake.mu);
    wake.stop = true;
  }
  stats.join();
  unlink(stats_path.c_str());
  host.reset();
  return waited;
}

// Re-executes this binary with --foreground in a new session and waits for its readiness line.
absl::Status RunBackground(const MountCli& c, const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {
    close(fds[0]);
    int keep = dup(fds[1]);  // without O_CLOEXEC
    setsid();
    int null = open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(null, 1);
    int log =
        c.log_file.empty() ? null : open(c.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    dup2(log < 0 ? null : log, 2);
    std::vector<std::string> args = argv;
    args.push_back("--foreground");
    args.push_back(absl::StrCat("--ready-fd=", keep));
    std::vector<char*> cargv;
    for (auto& a : args) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execv("/proc/self/exe", cargv.data());
    _exit(127);
  }
  close(fds[1]);
  std::string line;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) line.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  if (line.rfind("OK", 0) == 0) {
    printf("mounted %s at %s (pid %d)\n", c.ref.c_str(), c.dir.c_str(), pid);
    return absl::OkStatus();
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (line.rfind("ERR ", 0) == 0) {
    std::string rest = line.substr(4);
    if (!rest.empty() && rest.back() == '\n') rest.pop_back();
    int code = 2;
    size_t sp = rest.find(' ');
    (void)absl::SimpleAtoi(rest.substr(0, sp), &code);
    return absl::Status(static_cast<absl::StatusCode>(code),
                        sp == std::string::npos ? "" : rest.substr(sp + 1));
  }
  return absl::InternalError("the mount process exited before it was ready");
}

absl::Status RunUmount(const std::string& dir) {
  if (umount2(dir.c_str(), 0) == 0) return absl::OkStatus();
  int err = errno;
  if (err == EPERM) {
    if (FusermountUnmount(dir, /*lazy=*/false)) return absl::OkStatus();
  }
  if (err == EINVAL) return absl::InvalidArgumentError(absl::StrCat(dir, ": not a mount point"));
  if (err == EBUSY) {
    return absl::FailedPreconditionError(absl::StrCat(dir, ": busy (files are open)"));
  }
  return absl::InternalError(absl::StrCat("umount ", dir, ": ", strerror(err)));
}

std::optional<nlohmann::json> ReadStatsFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

// True when `pid` runs this same binary as `modelfs mount`: only then is it sent the refresh
// signal (for any other process, a reused pid, SIGUSR1 would be fatal).
bool IsMountProcess(pid_t pid) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return false;
  const fs::path other = fs::read_symlink(absl::StrCat("/proc/", pid, "/exe"), ec);
  if (ec || other != self) return false;
  std::ifstream cmdline(absl::StrCat("/proc/", pid, "/cmdline"), std::ios::binary);
  for (std::string arg; std::getline(cmdline, arg, '\0');) {
    if (arg == "mount") return true;
  }
  return false;
}

// The mount's counters as of now: asks the mount process to write them (it answers within
// milliseconds) and waits at most 2 s for that; the file as it is otherwise (at most 1 s old).
absl::StatusOr<nlohmann::json> FreshStats(const std::string& dir) {
  const std::string path = StatsPath(dir);
  std::optional<nlohmann::json> j = ReadStatsFile(path);
  if (!j) {
    if (access(path.c_str(), F_OK) != 0) {
      return absl::NotFoundError(absl::StrCat(dir, ": no modelfs mount with live counters"));
    }
    return absl::InternalError(absl::StrCat("unreadable counters file ", path));
  }
  // A mount that writes taken_ns answers the refresh signal; older ones would die of it.
  if (!j->contains("taken_ns") || !j->contains("pid") || !(*j)["pid"].is_number_integer()) {
    return *j;
  }
  const pid_t pid = (*j)["pid"].get<pid_t>();
  if (pid <= 0 || !IsMountProcess(pid)) return *j;
  const int64_t asked_ns = absl::GetCurrentTimeNanos();
  if (kill(pid, kStatsRefreshSignal) != 0) return *j;
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  while (absl::Now() < deadline) {
    std::optional<nlohmann::json> now = ReadStatsFile(path);
    if (now && now->contains("taken_ns") && (*now)["taken_ns"].is_number_integer() &&
        (*now)["taken_ns"].get<int64_t>() >= asked_ns) {
      return *now;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return *j;
}

absl::Status RunStats(const std::string& dir, bool json) {
  ASSIGN_OR_RETURN(nlohmann::json j, FreshStats(dir));
  if (json) {
    printf("%s\n", j.dump(2).c_str());
    return absl::OkStatus();
  }
  for (auto& [k, v] : j.items()) printf("%-22s %s\n", k.c_str(), v.dump().c_str());
  return absl::OkStatus();
}

}  // namespace

void RegisterMountCommands(CLI::App& app, Context& ctx, const std::vector<std::string>& argv) {
  {
    auto c = std::make_shared<MountCli>();
    CLI::App* cmd =
        app.add_subcommand("mount",
                           "Mount a model lazily and verified (REF: a volume image for per-chunk "
                           "verification; a ModelPack artifact or an ordinary image such as a "
                           "KServe modelcar for whole-layer verification)");
    cmd->add_option("REF", c->ref, "registry/repo:tag or registry/repo@sha256:...")->required();
    cmd->add_option("DIR", c->dir, "Mount point (an existing directory)")->required();
    cmd->add_flag("--plain-http", c->plain_http,
                  "Plain HTTP to this registry (trusted hosts only)");
    cmd->add_option("--hosts-dir", c->hosts_dir, "containerd-style certs.d directory");
    cmd->add_option("--docker-config", c->docker_config, "docker config.json with credentials");
    cmd->add_option(
        "--cache", c->cache_dir,
        "Cache directory (default /var/lib/modelfs/cache as root, else ~/.cache/modelfs)");
    cmd->add_option("--cache-max-mib", c->cache_max_mib,
                    "Evict unreferenced layers past this size");
    cmd->add_flag("--foreground", c->foreground, "Stay in the foreground until unmounted");
    cmd->add_flag("--insecure-stream", c->insecure_stream,
                  "Serve bytes before verification (they are still checked at the end). Unsafe.");
    cmd->add_option("--prefetch", c->prefetch, "Background fetch: all, headers or none")
        ->default_val("headers");
    cmd->add_option("--read-deadline", c->read_deadline_s,
                    "Seconds before a read that cannot be served returns EIO")
        ->default_val(30);
    cmd->add_flag("--passthrough,!--no-passthrough", c->passthrough,
                  "Serve files of verified, sealed layers by FUSE passthrough (default on)");
    cmd->add_flag("--direct-io,!--no-direct-io", c->direct_io,
                  "Open files not served by passthrough with direct_io, so read() keeps no "
                  "second copy in the page cache (default on)");
    cmd->add_flag("--drop-served-pages,!--keep-served-pages", c->drop_served_pages,
                  "Drop cache-file pages once served and on disk (default off: they are "
                  "what the next reader of the mount reads from memory)");
    cmd->add_flag("--audit,!--no-audit", c->audit,
                  "Once every chunk of a layer is verified, rehash the whole layer against its "
                  "digest at idle priority (default on)");
    cmd->add_option("--persist-delay", c->persist_delay,
                    "While the model is being read, flush fetched chunks to disk (and record "
                    "them) only once reads pause for a second, or after this long (30s; 0: "
                    "after every fetch)")
        ->default_val("30s");
    cmd->add_option("--scrub-interval", c->scrub_interval,
                    "Re-verify sealed layers of the cache this often, in the background at idle "
                    "priority (24h, 90m; 0: never)")
        ->default_val("24h");
    cmd->add_option("--scrub-rate-mib", c->scrub_rate_mib,
                    "The scrub reads at most this many MiB a second")
        ->default_val(32);
    cmd->add_option("--log", c->log_file, "Log file for a background mount");
    cmd->add_option("--policy", c->policy,
                    "containers-policy.json: REF's signatures are verified before anything is "
                    "fetched or mounted; a refusal exits 1 (docs/signing.md)");
    cmd->add_option("--state", c->state_ref,
                    "A state of REF's model (`modelfs state push`), shown under .state/; a "
                    "state of another model is refused (exit 2)");
    cmd->add_option("--ready-fd", c->ready_fd)->group("");  // internal
    cmd->callback([c, &ctx, argv] {
      ctx.status =
          (c->foreground || c->ready_fd >= 0) ? RunForeground(*c) : RunBackground(*c, argv);
      if (c->ready_fd >= 0 && !ctx.status.ok()) Report(c->ready_fd, ctx.status);
    });
  }
  {
    auto dir = std::make_shared<std::string>();
    CLI::App* cmd = app.add_subcommand("umount", "Unmount a modelfs mount");
    cmd->add_option("DIR", *dir, "Mount point")->required();
    cmd->callback([dir, &ctx] { ctx.status = RunUmount(*dir); });
  }
  {
    auto dir = std::make_shared<std::string>();
    auto json = std::make_shared<bool>(false);
    CLI::App* cmd = app.add_subcommand(
        "stats", "Live counters of a mount: bytes fetched, cache hits, verification failures");
    cmd->add_option("DIR", *dir, "Mount point")->required();
    cmd->add_flag("--json", *json, "Print JSON");
    cmd->callback([dir, json, &ctx] { ctx.status = RunStats(*dir, *json); });
  }
}

}  // namespace modelfs::cli
