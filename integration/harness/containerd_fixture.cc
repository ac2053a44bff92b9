#include "integration/harness/containerd_fixture.h"

#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "core/status/status_macros.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

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

std::string Containerd::WhyUnavailable() {
  if (geteuid() != 0) return "containerd needs root (overlay mounts)";
  if (!fs::exists(kContainerdBinary) || !fs::exists(kCtrBinary)) {
    return "containerd 1.6 / ctr not installed (/usr/bin/containerd, /usr/bin/ctr)";
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

absl::StatusOr<std::unique_ptr<Containerd>> Containerd::Start(ContainerdOptions options) {
  std::unique_ptr<Containerd> c(new Containerd());
  c->options_ = options;
  c->ns_ = !options.ns.empty() ? options.ns : (options.cri ? "k8s.io" : "modelfs-e2e");
  c->socket_ = c->dir_.Join("containerd.sock").string();
  c->hosts_dir_ = c->dir_.Join("certs.d").string();
  fs::create_directories(c->hosts_dir_);
  if (!options.registry_host_port.empty()) {
    const std::string& r = options.registry_host_port;
    c->dir_.WriteFile(absl::StrCat("certs.d/", r, "/hosts.toml"),
                      absl::StrCat("server = \"http://", r, "\"\n\n[host.\"http://", r,
                                   "\"]\n  capabilities = [\"pull\", \"resolve\"]\n"));
  }
  const std::string d = c->dir_.path().string();
  std::string config = absl::StrCat("version = 2\n", "root = ", Quote(d + "/root"), "\n",
                                    "state = ", Quote(d + "/state"), "\n");
  if (!options.cri)
    absl::StrAppend(&config, "disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n");
  absl::StrAppend(&config, "[grpc]\n  address = ", Quote(c->socket_), "\n",
                  "[ttrpc]\n  address = ", Quote(c->socket_ + ".ttrpc"), "\n",
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
    fs::create_directories(d + "/cni/bin");
    fs::create_directories(d + "/cni/conf");
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
        "    config_path = ", Quote(c->hosts_dir_), "\n");
  }
  std::string config_path = c->dir_.WriteFile("config.toml", config).string();
  ASSIGN_OR_RETURN(c->process_, ChildProcess::Spawn({kContainerdBinary, "--config", config_path},
                                                    c->log_path()));
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (true) {
    if (fs::exists(c->socket_)) {
      absl::StatusOr<ProcessResult> v =
          RunProcess({kCtrBinary, "--address", c->socket_, "plugins", "ls"}, {}, absl::Seconds(10));
      if (v.ok() && v->exit_code == 0) {
        if (!options.cri) break;
        // "io.containerd.grpc.v1  cri  linux/amd64  ok"
        bool cri_ok = false;
        for (absl::string_view line : absl::StrSplit(v->out, '\n')) {
          std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
          if (f.size() >= 3 && f[0] == "io.containerd.grpc.v1" && f[1] == "cri") {
            cri_ok = f.back() == "ok";
          }
        }
        if (cri_ok) break;
        return absl::FailedPreconditionError(
            absl::StrCat("containerd's CRI plugin did not load; log:\n", ReadAll(c->log_path())));
      }
    }
    if (!c->process_->running() || absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("containerd did not come up; log:\n", ReadAll(c->log_path())));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return c;
}

void Containerd::Stop() {
  if (process_) process_->Stop();
}

Containerd::~Containerd() {
  // Unmount what a failed test may have left, stop the daemon, then unmount what it left.
  DetachMountsUnder(dir_.path().string());
  Stop();
  DetachMountsUnder(dir_.path().string());
}

absl::StatusOr<ProcessResult> Containerd::Ctr(const std::vector<std::string>& args,
                                              absl::Duration timeout) const {
  std::vector<std::string> argv = {kCtrBinary, "--address", socket_, "--namespace", ns_};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProcess(argv, {}, timeout);
}

}  // namespace modelfs::testing
