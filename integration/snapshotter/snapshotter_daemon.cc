#include "integration/snapshotter/snapshotter_daemon.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/oci/digest.h"
#include "core/oci/tar.h"
#include "core/registry/registry_client.h"
#include "core/status/status_macros.h"
#include "nlohmann/json.hpp"
#include "testsupport/harness/containerd_fixture.h"
#include "testsupport/harness/publish_test_env.h"

#ifndef MODELFS_SNAPSHOTTER_BIN
#error "MODELFS_SNAPSHOTTER_BIN must name the modelfs-snapshotter binary"
#endif

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;

bool UnixSocketAccepts(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    close(fd);
    return false;
  }
  memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

std::string TomlString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

}  // namespace

std::string SnapshotterDaemon::Binary() {
  const char* env = std::getenv("MODELFS_SNAPSHOTTER_BIN");
  if (env != nullptr && *env != '\0') return env;
  return MODELFS_SNAPSHOTTER_BIN;
}

std::string SnapshotterDaemon::WhyUnavailable() {
  if (geteuid() != 0) return "the snapshotter needs root (FUSE with allow_other, overlay mounts)";
  if (access("/dev/fuse", R_OK | W_OK) != 0) return "no usable /dev/fuse";
  if (access(Binary().c_str(), X_OK) != 0) {
    return absl::StrCat("modelfs-snapshotter is not built (", Binary(),
                        "); build target modelfs-snapshotter");
  }
  return "";
}

absl::StatusOr<std::unique_ptr<SnapshotterDaemon>> SnapshotterDaemon::Start(
    SnapshotterDaemonOptions options) {
  std::unique_ptr<SnapshotterDaemon> d(new SnapshotterDaemon());
  d->root_ = d->dir_.Join("root").string();
  d->socket_ = d->dir_.Join("snapshotter.sock").string();
  d->hosts_dir_ = options.hosts_dir.empty() ? d->dir_.Join("certs.d").string() : options.hosts_dir;
  fs::create_directories(d->root_);
  fs::create_directories(d->hosts_dir_);
  ASSIGN_OR_RETURN(int port, FreeLoopbackPort());
  d->metrics_address_ = absl::StrCat("127.0.0.1:", port);
  std::vector<std::string> hosts;
  for (const auto& h : options.insecure_hosts) hosts.push_back(TomlString(h));
  std::vector<std::string> model_hosts;
  for (const auto& h : options.model_hosts) model_hosts.push_back(TomlString(h));
  std::string config = absl::StrCat(
      "insecure_hosts = [", absl::StrJoin(hosts, ", "), "]\n", "model_hosts = [",
      absl::StrJoin(model_hosts, ", "), "]\n", "policy = ", TomlString(options.policy), "\n",
      "metrics_address = ", TomlString(d->metrics_address_), "\n",
      // Without one, a credentials file that does not exist: a developer's ~/.docker never
      // leaks in.
      "docker_config = ",
      TomlString(options.docker_config.empty() ? d->dir_.Join("no-docker-config.json").string()
                                               : options.docker_config),
      "\n", "log_level = \"debug\"\n",
      "containerd_address = ", TomlString(options.containerd_address), "\n",
      options.top_level_config, "\n[cache]\nprefetch = ", TomlString(options.prefetch), "\n",
      options.extra_config, "\n");
  d->config_path_ = d->dir_.WriteFile("snapshotter.toml", config).string();
  RETURN_IF_ERROR(d->Spawn(/*append=*/false));
  return d;
}

absl::Status SnapshotterDaemon::Spawn(bool append) {
  std::vector<std::string> argv = {Binary(),    "--config", config_path_,  "--root",  root_,
                                   "--address", socket_,    "--hosts-dir", hosts_dir_};
  const std::string log = log_path();
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork(): ", strerror(errno)));
  if (pid == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  pid_ = pid;
  return WaitReady();
}

absl::Status SnapshotterDaemon::WaitReady() {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!UnixSocketAccepts(socket_)) {
    if (!running()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "modelfs-snapshotter exited before it was ready; log:\n", ReadFileOrDie(log_path())));
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("modelfs-snapshotter not ready after 30 s (",
                                                      socket_, "); log:\n",
                                                      ReadFileOrDie(log_path())));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::OkStatus();
}

bool SnapshotterDaemon::running() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

int SnapshotterDaemon::Stop(int grace_seconds) {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  const absl::Time deadline = absl::Now() + absl::Seconds(grace_seconds);
  int status = 0;
  while (true) {
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) break;
    if (r < 0 && errno != EINTR) {
      pid_ = -1;
      return -1;
    }
    if (absl::Now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

absl::Status SnapshotterDaemon::Restart() {
  if (running()) Stop();
  return Spawn(/*append=*/true);
}

SnapshotterDaemon::~SnapshotterDaemon() {
  Stop();
  // What a killed daemon (or a failed test) left: the FUSE mount, overlay mounts.
  DetachMountsUnder(dir_.path().string());
}

// ---------------------------------------------------------------------------------------------

std::string ChainId(const std::vector<std::string>& diff_ids) {
  if (diff_ids.empty()) return "";
  std::string chain = diff_ids[0];
  for (size_t i = 1; i < diff_ids.size(); ++i) {
    chain = Digest::Of(absl::StrCat(chain, " ", diff_ids[i])).str();
  }
  return chain;
}

absl::StatusOr<PushedImage> PushOrdinaryImage(const std::string& host_port, const std::string& repo,
                                              const std::string& tag,
                                              const std::vector<std::vector<LayerFile>>& layers,
                                              const std::vector<std::string>& cmd) {
  ASSIGN_OR_RETURN(std::unique_ptr<RegistryClient> client, ConnectPlainHttp(host_port));
  PushedImage out;
  nlohmann::json layer_descs = nlohmann::json::array();
  for (const auto& files : layers) {
    TarWriter w;
    std::set<std::string> dirs;
    for (const auto& f : files) {
      fs::path p(f.path);
      // Parent directories first (once each), as image builders write them.
      std::string prefix;
      for (auto it = p.begin(); std::next(it) != p.end(); ++it) {
        prefix = prefix.empty() ? it->string() : prefix + "/" + it->string();
        if (dirs.insert(prefix).second) RETURN_IF_ERROR(w.AddDirectory(prefix));
      }
      if (!f.symlink_target.empty()) {
        RETURN_IF_ERROR(w.AddSymlink(f.path, f.symlink_target));
      } else {
        RETURN_IF_ERROR(w.AddFile(f.path, f.content, f.mode));
      }
    }
    std::string tar = w.Finish();
    const uint64_t size = tar.size();
    ASSIGN_OR_RETURN(Digest d, UploadBlob(*client, repo, std::move(tar)));
    out.diff_ids.push_back(d.str());
    layer_descs.push_back({{"mediaType", "application/vnd.oci.image.layer.v1.tar"},
                           {"digest", d.str()},
                           {"size", size}});
  }
  nlohmann::json runtime_config = nlohmann::json::object();
  if (!cmd.empty()) runtime_config["Cmd"] = cmd;
  nlohmann::json config = {{"architecture", "amd64"},
                           {"os", "linux"},
                           {"config", runtime_config},
                           {"rootfs", {{"type", "layers"}, {"diff_ids", out.diff_ids}}}};
  std::string config_bytes = config.dump();
  const uint64_t config_size = config_bytes.size();
  ASSIGN_OR_RETURN(Digest cd, UploadBlob(*client, repo, std::move(config_bytes)));
  out.config_digest = cd.str();
  nlohmann::json manifest = {{"schemaVersion", 2},
                             {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                             {"config",
                              {{"mediaType", "application/vnd.oci.image.config.v1+json"},
                               {"digest", cd.str()},
                               {"size", config_size}}},
                             {"layers", layer_descs}};
  ASSIGN_OR_RETURN(Digest md, client->PutManifest(repo, tag, manifest.dump(),
                                                  "application/vnd.oci.image.manifest.v1+json"));
  out.manifest_digest = md.str();
  out.reference = absl::StrCat(host_port, "/", repo, ":", tag);
  out.chain_id = ChainId(out.diff_ids);
  return out;
}

std::map<std::string, int> BlobGetsInAccessLog(const std::string& log, size_t offset,
                                               const std::string& repo, const std::string& status) {
  std::map<std::string, int> out;
  std::regex re(absl::StrCat("\"GET /v2/", repo, "/blobs/(sha256:[0-9a-f]{64}) HTTP/[0-9.]+\" ",
                             status.empty() ? "[0-9]+" : status, " "));
  std::string tail = log.substr(std::min(offset, log.size()));
  for (std::sregex_iterator it(tail.begin(), tail.end(), re), end; it != end; ++it) {
    ++out[(*it)[1].str()];
  }
  return out;
}

std::map<std::string, uint64_t> BlobBytesInAccessLog(const std::string& log, size_t offset,
                                                     const std::string& repo) {
  std::map<std::string, uint64_t> out;
  std::regex re(absl::StrCat("\"GET /v2/", repo,
                             "/blobs/(sha256:[0-9a-f]{64}) HTTP/[0-9.]+\" [0-9]+ ([0-9]+) "));
  std::string tail = log.substr(std::min(offset, log.size()));
  for (std::sregex_iterator it(tail.begin(), tail.end(), re), end; it != end; ++it) {
    out[(*it)[1].str()] += std::stoull((*it)[2].str());
  }
  return out;
}

}  // namespace modelfs::testing
