#include "integration/mount/mount_test_env.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "core/oci/digest.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string UnescapeMountField(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      int v = 0;
      bool ok = true;
      for (size_t k = 1; k <= 3; ++k) {
        char c = s[i + k];
        if (c < '0' || c > '7') ok = false;
        v = v * 8 + (c - '0');
      }
      if (ok) {
        out.push_back(static_cast<char>(v));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

// Where `modelfs mount` keeps the live counters of each mount (one JSON file per mount).
std::vector<std::string> StatsDirs() {
  std::vector<std::string> dirs = {"/run/modelfs/mounts"};
  const char* rt = getenv("XDG_RUNTIME_DIR");
  dirs.push_back(absl::StrCat(rt ? rt : "/tmp", "/modelfs-mounts"));
  return dirs;
}

// The counters file whose "pid" is `pid`.
std::optional<std::string> FindStatsFile(pid_t pid) {
  for (const std::string& d : StatsDirs()) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(d, ec)) {
      if (e.path().extension() != ".json") continue;
      std::ifstream in(e.path());
      std::stringstream ss;
      ss << in.rdbuf();
      nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
      if (!j.is_discarded() && j.is_object() && j.value("pid", -1) == pid) return e.path().string();
    }
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout) {
  return RunProcess(argv, {}, timeout);
}

void BecomeSubreaper() { prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); }

std::optional<MountInfoEntry> FindMount(const std::string& dir) {
  std::error_code ec;
  std::string want = fs::weakly_canonical(dir, ec).string();
  if (ec) want = dir;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  std::optional<MountInfoEntry> found;
  while (std::getline(in, line)) {
    // id parent major:minor root mount_point mount_options [optional...] - type source super
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    if (f.size() < 10) continue;
    size_t dash = 6;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (dash + 3 >= f.size()) continue;
    if (UnescapeMountField(f[4]) != want) continue;
    found = MountInfoEntry{UnescapeMountField(f[4]), f[5], f[dash + 1],
                           UnescapeMountField(f[dash + 2]), f[dash + 3]};
  }
  return found;
}

bool HasOption(const std::string& options, const std::string& option) {
  for (absl::string_view o : absl::StrSplit(options, ',')) {
    if (o == option) return true;
  }
  return false;
}

absl::StatusOr<std::unique_ptr<ModelMount>> ModelMount::Start(const std::string& ref,
                                                              const std::string& dir,
                                                              const MountOptions& o) {
  std::vector<std::string> argv = {ModelfsBinary(), "mount",      "--cache",
                                   o.cache_dir,     "--prefetch", o.prefetch};
  if (o.plain_http) argv.push_back("--plain-http");
  if (!o.hosts_dir.empty()) argv.insert(argv.end(), {"--hosts-dir", o.hosts_dir});
  if (!o.docker_config.empty()) argv.insert(argv.end(), {"--docker-config", o.docker_config});
  if (o.read_deadline_s > 0) {
    argv.insert(argv.end(), {"--read-deadline", absl::StrCat(o.read_deadline_s)});
  }
  if (!o.log_file.empty()) argv.insert(argv.end(), {"--log", o.log_file});
  argv.insert(argv.end(), o.extra_args.begin(), o.extra_args.end());
  argv.insert(argv.end(), {ref, dir});
  auto r = RunCommand(argv);
  if (!r.ok()) return r.status();
  // "mounted REF at DIR (pid N)"
  size_t p = r->out.rfind("(pid ");
  int pid = 0;
  if (r->exit_code != 0 || p == std::string::npos ||
      !absl::SimpleAtoi(r->out.substr(p + 5, r->out.find(')', p) - p - 5), &pid)) {
    return absl::FailedPreconditionError(absl::StrCat("`", absl::StrJoin(argv, " "), "` exited ",
                                                      r->exit_code, "; stdout: ", r->out,
                                                      "; stderr: ", r->err));
  }
  std::unique_ptr<ModelMount> m(new ModelMount());
  m->dir_ = dir;
  m->pid_ = pid;
  m->mounted_ = true;
  return m;
}

ModelMount::~ModelMount() { (void)Unmount(); }

absl::Status ModelMount::Unmount() {
  if (!mounted_) return absl::OkStatus();
  mounted_ = false;
  if (FindMount(dir_).has_value()) (void)RunCommand({ModelfsBinary(), "umount", dir_});
  if (FindMount(dir_).has_value()) (void)RunCommand({"fusermount3", "-u", "-z", dir_});
  // The daemon is our child (subreaper) once `modelfs mount` has returned.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  bool exited = false;
  while (absl::Now() < deadline) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno == ECHILD && kill(pid_, 0) != 0)) {
      exited = true;
      break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  if (!exited) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  if (FindMount(dir_).has_value()) {
    return absl::InternalError(absl::StrCat(dir_, " is still mounted"));
  }
  if (!exited) {
    return absl::InternalError(absl::StrCat("mount daemon ", pid_, " did not exit; killed"));
  }
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> ModelMount::Stats() const {
  auto r = RunCommand({ModelfsBinary(), "stats", dir_, "--json"});
  if (!r.ok()) return r.status();
  nlohmann::json j = nlohmann::json::parse(r->out, nullptr, false);
  if (r->exit_code != 0 || j.is_discarded()) {
    return absl::InternalError(
        absl::StrCat("modelfs stats ", dir_, " exited ", r->exit_code, ": ", r->out, r->err));
  }
  return j;
}

absl::StatusOr<nlohmann::json> ModelMount::FreshStats() const {
  timespec start;
  clock_gettime(CLOCK_REALTIME, &start);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    std::optional<std::string> path = FindStatsFile(pid_);
    struct stat st;
    if (path && stat(path->c_str(), &st) == 0 &&
        (st.st_mtim.tv_sec > start.tv_sec ||
         (st.st_mtim.tv_sec == start.tv_sec && st.st_mtim.tv_nsec > start.tv_nsec))) {
      return Stats();
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("the counters of the mount at ", dir_, " (pid ", pid_, ") were not rewritten"));
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", path, ": ", strerror(errno)));
  std::string out;
  char buf[1 << 16];
  while (true) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      close(fd);
      return absl::InternalError(
          absl::StrCat("read ", path, " at offset ", out.size(), ": ", strerror(err)));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

absl::StatusOr<std::string> PreadExact(int fd, uint64_t offset, uint64_t length, int* errno_out) {
  if (errno_out != nullptr) *errno_out = 0;
  std::string out(length, '\0');
  uint64_t done = 0;
  while (done < length) {
    ssize_t n = pread(fd, out.data() + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno_out != nullptr) *errno_out = errno;
      return absl::InternalError(
          absl::StrCat("pread at offset ", offset + done, ": ", strerror(errno)));
    }
    if (n == 0) break;
    done += static_cast<uint64_t>(n);
  }
  out.resize(done);
  return out;
}

std::string Sha256Of(const std::string& bytes) {
  Sha256 h;
  h.Update(bytes.data(), bytes.size());
  return h.Finish().str();
}

}  // namespace modelfs::testing
