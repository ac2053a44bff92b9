#include "testsupport/harness/containerd_fixture.h"

#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "core/status/status_macros.h"
#include "testsupport/harness/process_runner.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;

// TOML basic strings: the paths here are mkdtemp names, but quote defensively.
std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

}  // namespace

std::vector<std::string> MountsUnder(const std::string& dir) {
  std::vector<std::string> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    if (f.size() > 4 && (f[4] == dir || absl::StartsWith(f[4], dir + "/"))) out.push_back(f[4]);
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.size() > b.size(); });
  return out;
}

void DetachMountsUnder(const std::string& dir) {
  // A mount can hide another one at the same point; go round until nothing is left.
  for (int round = 0; round < 8; ++round) {
    std::vector<std::string> mounts = MountsUnder(dir);
    if (mounts.empty()) return;
    for (const auto& m : mounts) umount2(m.c_str(), MNT_DETACH);
  }
}

std::string Containerd::WhyUnavailable(const std::string& release_dir) {
  if (geteuid() != 0) return "containerd needs root (overlay mounts)";
  if (release_dir.empty() && (!fs::exists(kContainerdBinary) || !fs::exists(kCtrBinary))) {
    return "containerd 1.6 / ctr not installed (/usr/bin/containerd, /usr/bin/ctr)";
  }
  if (!release_dir.empty()) {
    for (const char* bin : {"containerd", "ctr", "containerd-shim-runc-v2"}) {
      if (!fs::exists(release_dir + "/" + bin))
        return absl::StrCat("no ", bin, " in ", release_dir);
    }
    if (!fs::exists(kRuncBinary)) return absl::StrCat(kRuncBinary, " not installed (package runc)");
  }
  if (!absl::StrContains(ReadAll("/proc/filesystems"), "overlay")) {
    return "the kernel has no overlay filesystem";
  }
  return "";
}

std::string Containerd::MountPoint(const std::string& name) const {
  std::string p = dir_.Join(name).string();
  fs::create_directories(p);
  return p;
}

namespace {

// containerd 1.6 (config version 2): CRI for image pulls only.
std::string ConfigV2(const ContainerdOptions& options, const std::string& d,
                     const std::string& socket, const std::string& hosts_dir) {
  std::string config = absl::StrCat("version = 2\n", "root = ", Quote(d + "/root"), "\n",
                                    "state = ", Quote(d + "/state"), "\n");
  if (!options.cri)
    absl::StrAppend(&config, "disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n");
  absl::StrAppend(&config, "[grpc]\n  address = ", Quote(socket), "\n",
                  "[ttrpc]\n  address = ", Quote(socket + ".ttrpc"), "\n",
                  "[debug]\n  address = \"\"\n", "[metrics]\n  address = \"\"\n",
                  // The opt plugin would otherwise create /opt/containerd on the host.
                  "[plugins.\"io.containerd.internal.v1.opt\"]\n  path = ", Quote(d + "/opt"),
                  "\n");
  if (!options.proxy_snapshotter_address.empty()) {
    absl::StrAppend(
        &config, "[proxy_plugins.", options.proxy_snapshotter_name,
        "]\n  type = \"snapshot\"\n  address = ", Quote(options.proxy_snapshotter_address), "\n");
  }
  if (options.cri) {
    // Only the image service is exercised: no sandbox is ever run, so the sandbox image is
    // never pulled, and cgroups/AppArmor are off so the plugin loads in a container too.
    absl::StrAppend(
        &config, "[plugins.\"io.containerd.grpc.v1.cri\"]\n",
        "  stream_server_address = \"127.0.0.1\"\n", "  stream_server_port = \"0\"\n",
        "  sandbox_image = \"registry.invalid/pause:3.6\"\n", "  disable_cgroup = true\n",
        "  disable_apparmor = true\n", "  restrict_oom_score_adj = true\n",
        "  [plugins.\"io.containerd.grpc.v1.cri\".containerd]\n",
        "    snapshotter = ", Quote(options.cri_snapshotter), "\n",
        "    disable_snapshot_annotations = false\n",
        "  [plugins.\"io.containerd.grpc.v1.cri\".cni]\n", "    bin_dir = ", Quote(d + "/cni/bin"),
        "\n", "    conf_dir = ", Quote(d + "/cni/conf"), "\n",
        "  [plugins.\"io.containerd.grpc.v1.cri\".registry]\n",
        "    config_path = ", Quote(hosts_dir), "\n");
  }
  return config;
}

// containerd 2.x (config version 3, or 4 for 2.3: the same tables for what docs/install.md
// configures, the daemon's sockets elsewhere), laid out as docs/install.md configures a node,
// plus what keeps a test's containerd off the host's paths.
std::string ConfigV3(const ContainerdOptions& options, const std::string& d,
                     const std::string& socket, const std::string& hosts_dir) {
  std::string config =
      absl::StrCat("version = ", options.config_version, "\n", "root = ", Quote(d + "/root"), "\n",
                   "state = ", Quote(d + "/state"), "\n");
  std::string disabled = "\"io.containerd.nri.v1.nri\"";
  if (!options.cri) {
    absl::StrAppend(&disabled, ", \"io.containerd.grpc.v1.cri\", \"io.containerd.cri.v1.images\",",
                    " \"io.containerd.cri.v1.runtime\"");
  }
  absl::StrAppend(&config, "disabled_plugins = [", disabled, "]\n");
  // The daemon's own sockets: top-level tables up to version 3; version 4 (2.3) reads them from
  // the io.containerd.server.v1 plugins and ignores the old tables, serving on the host's
  // /run/containerd instead.
  const bool v4 = options.config_version >= 4;
  for (const auto& [table, address] : std::vector<std::pair<std::string, std::string>>{
           {"grpc", socket}, {"ttrpc", socket + ".ttrpc"}, {"debug", ""}, {"metrics", ""}}) {
    absl::StrAppend(&config,
                    v4 ? absl::StrCat("[plugins.\"io.containerd.server.v1.", table, "\"]")
                       : absl::StrCat("[", table, "]"),
                    "\n  address = ", Quote(address), "\n");
  }
  absl::StrAppend(
      &config, "[plugins.\"io.containerd.internal.v1.opt\"]\n  path = ", Quote(d + "/opt"), "\n");
  if (!options.proxy_snapshotter_address.empty()) {
    absl::StrAppend(
        &config, "[proxy_plugins.", options.proxy_snapshotter_name,
        "]\n  type = \"snapshot\"\n  address = ", Quote(options.proxy_snapshotter_address), "\n",
        // 2.1's transfer service passes image annotations to a proxy snapshotter
        // only with this export.
        "  [proxy_plugins.", options.proxy_snapshotter_name, ".exports]\n",
        "    enable_remote_snapshot_annotations = \"true\"\n");
  }
  if (!options.cri) return config;
  const std::string& snap = options.cri_snapshotter;
  absl::StrAppend(
      &config, "[plugins.\"io.containerd.cri.v1.images\"]\n", "  snapshotter = ", Quote(snap), "\n",
      "  [plugins.\"io.containerd.cri.v1.images\".pinned_images]\n",
      "    sandbox = ", Quote(options.sandbox_image), "\n",
      "  [plugins.\"io.containerd.cri.v1.images\".registry]\n",
      "    config_path = ", Quote(hosts_dir), "\n",
      // AppArmor and SELinux are host policy a test must not depend on; CDI would read the
      // host's /etc/cdi.
      "[plugins.\"io.containerd.cri.v1.runtime\"]\n", "  enable_selinux = false\n",
      "  disable_apparmor = true\n", "  restrict_oom_score_adj = true\n", "  enable_cdi = false\n",
      "  [plugins.\"io.containerd.cri.v1.runtime\".containerd]\n",
      "    default_runtime_name = \"runc\"\n",
      "    [plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runc]\n",
      "      runtime_type = \"io.containerd.runc.v2\"\n",
      // Image volumes are prepared with the runtime handler's snapshotter.
      "      snapshotter = ", Quote(snap), "\n",
      "      [plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runc.options]\n",
      "        BinaryName = ", Quote(kRuncBinary), "\n", "        Root = ", Quote(d + "/runc"),
      "\n", "  [plugins.\"io.containerd.cri.v1.runtime\".cni]\n", "    bin_dirs = [",
      Quote(d + "/cni/bin"), "]\n", "    conf_dir = ", Quote(d + "/cni/conf"), "\n",
      "[plugins.\"io.containerd.grpc.v1.cri\"]\n", "  stream_server_address = \"127.0.0.1\"\n",
      "  stream_server_port = \"0\"\n",
      // 2.1 unpacks only with the snapshotters listed; the list replaces the default.
      "[[plugins.\"io.containerd.transfer.v1.local\".unpack_config]]\n", "  platform = \"linux\"\n",
      "  snapshotter = ", Quote(snap), "\n");
  if (snap != "overlayfs") {
    absl::StrAppend(&config, "[[plugins.\"io.containerd.transfer.v1.local\".unpack_config]]\n",
                    "  platform = \"linux\"\n", "  snapshotter = \"overlayfs\"\n");
  }
  return config;
}

// Whether `ctr plugins ls` output shows the plugin (type, id) with status "ok"; nullopt when
// it is not listed.
std::optional<bool> PluginOk(const std::string& plugins_ls, absl::string_view type,
                             absl::string_view id) {
  for (absl::string_view line : absl::StrSplit(plugins_ls, '\n')) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() >= 3 && f[0] == type && f[1] == id) return f.back() == "ok";
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Containerd>> Containerd::Start(ContainerdOptions options) {
  std::unique_ptr<Containerd> c(new Containerd());
  c->options_ = options;
  c->ns_ = !options.ns.empty() ? options.ns : (options.cri ? "k8s.io" : "modelfs-e2e");
  c->socket_ =
      options.socket_path.empty() ? c->dir_.Join("containerd.sock").string() : options.socket_path;
  c->hosts_dir_ = c->dir_.Join("certs.d").string();
  fs::create_directories(c->hosts_dir_);
  if (!options.registry_host_port.empty()) {
    const std::string& r = options.registry_host_port;
    c->dir_.WriteFile(absl::StrCat("certs.d/", r, "/hosts.toml"),
                      absl::StrCat("server = \"http://", r, "\"\n\n[host.\"http://", r,
                                   "\"]\n  capabilities = [\"pull\", \"resolve\"]\n"));
  }
  const std::string d = c->dir_.path().string();
  if (options.cri) {
    fs::create_directories(d + "/cni/bin");
    fs::create_directories(d + "/cni/conf");
  }
  const bool v2 = !options.release_dir.empty();
  const std::string config = v2 ? ConfigV3(options, d, c->socket_, c->hosts_dir_)
                                : ConfigV2(options, d, c->socket_, c->hosts_dir_);
  c->config_path_ = c->dir_.WriteFile("config.toml", config).string();
  RETURN_IF_ERROR(c->SpawnAndWait(/*append_log=*/false));
  return c;
}

absl::Status Containerd::SpawnAndWait(bool append_log) {
  const bool v2 = !options_.release_dir.empty();
  const std::string containerd_binary =
      v2 ? options_.release_dir + "/containerd" : kContainerdBinary;
  ctr_binary_ = v2 ? options_.release_dir + "/ctr" : kCtrBinary;
  std::vector<std::string> argv = {containerd_binary, "--config", config_path_};
  if (v2) {
    // containerd finds its shim on PATH: the release's own one must come first, or the
    // system's (1.6) shim would run. env(1) execs, so the PID stays containerd's.
    const char* path = std::getenv("PATH");
    argv.insert(
        argv.begin(),
        {"/usr/bin/env", absl::StrCat("PATH=", options_.release_dir, ":",
                                      path != nullptr ? path : "/usr/sbin:/usr/bin:/sbin:/bin")});
  }
  ASSIGN_OR_RETURN(process_, ChildProcess::Spawn(argv, log_path(), append_log));
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (true) {
    if (fs::exists(socket_)) {
      absl::StatusOr<ProcessResult> v =
          RunProcess({ctr_binary_, "--address", socket_, "plugins", "ls"}, {}, absl::Seconds(10));
      if (v.ok() && v->exit_code == 0) {
        if (!options_.cri) break;
        // "io.containerd.grpc.v1  cri  linux/amd64  ok"; 2.x splits CRI into three plugins.
        std::vector<std::pair<absl::string_view, absl::string_view>> wanted = {
            {"io.containerd.grpc.v1", "cri"}};
        if (v2) {
          wanted.push_back({"io.containerd.cri.v1", "images"});
          wanted.push_back({"io.containerd.cri.v1", "runtime"});
        }
        bool all_ok = true;
        for (const auto& [type, id] : wanted) {
          std::optional<bool> ok = PluginOk(v->out, type, id);
          if (ok.has_value() && !*ok) {
            return absl::FailedPreconditionError(
                absl::StrCat("containerd's ", type, ".", id, " plugin did not load; plugins:\n",
                             v->out, "log:\n", ReadAll(log_path())));
          }
          all_ok = all_ok && ok.value_or(false);
        }
        if (all_ok) break;
      }
    }
    if (!process_->running() || absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("containerd did not come up; log:\n", ReadAll(log_path())));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::OkStatus();
}

absl::Status Containerd::Restart(const std::string& release_dir) {
  if (options_.release_dir.empty() || release_dir.empty()) {
    return absl::InvalidArgumentError("Containerd::Restart: only between 2.x releases");
  }
  Stop();
  // The socket file outlives the process; wait for the new one, not the old one.
  std::error_code ec;
  fs::remove(socket_, ec);
  options_.release_dir = release_dir;
  return SpawnAndWait(/*append_log=*/true);
}

void Containerd::Stop() {
  if (process_) process_->Stop();
}

// PIDs of processes whose command line has "-address <socket>": the shims containerd started
// for this fixture (the socket path is unique to it).
std::vector<pid_t> ShimsOf(const std::string& socket) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::vector<std::string> args =
        absl::StrSplit(ReadAll(entry.path().string() + "/cmdline"), '\0');
    for (size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == "-address" && args[i + 1] == socket) {
        out.push_back(static_cast<pid_t>(std::stol(name)));
        break;
      }
    }
  }
  return out;
}

void Containerd::KillLeftoverPods() {
  if (options_.release_dir.empty() || !options_.cri) return;
  // The runc shim keeps containers under <Root>/<namespace>.
  std::error_code ec;
  for (const auto& ns_root : fs::directory_iterator(dir_.Join("runc"), ec)) {
    const std::string root = ns_root.path().string();
    absl::StatusOr<ProcessResult> list =
        RunProcess({kRuncBinary, "--root", root, "list", "-q"}, {}, absl::Seconds(20));
    if (!list.ok() || list->exit_code != 0) continue;
    for (absl::string_view id : absl::StrSplit(list->out, '\n', absl::SkipEmpty())) {
      (void)RunProcess({kRuncBinary, "--root", root, "delete", "--force", std::string(id)}, {},
                       absl::Seconds(20));
    }
  }
  for (pid_t pid : ShimsOf(socket_)) kill(pid, SIGKILL);
}

Containerd::~Containerd() {
  // Pods a failed test did not delete, then mounts it may have left; stop the daemon, then
  // unmount what it left.
  KillLeftoverPods();
  DetachMountsUnder(dir_.path().string());
  Stop();
  DetachMountsUnder(dir_.path().string());
}

absl::StatusOr<ProcessResult> Containerd::Ctr(const std::vector<std::string>& args,
                                              absl::Duration timeout) const {
  std::vector<std::string> argv = {ctr_binary_, "--address", socket_, "--namespace", ns_};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProcess(argv, {}, timeout);
}

}  // namespace modelfs::testing
