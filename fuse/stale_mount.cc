#include "fuse/stale_mount.h"

#include <errno.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"

namespace modelfs {
namespace {

namespace fs = std::filesystem;

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && s.size() - i >= 4) {
      out.push_back(
          static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// Whether a FUSE filesystem is mounted exactly at `point` (resolved), from /proc/self/mountinfo:
// nothing here may touch it, whose server may be dead or hung.
bool FuseMountedAtPoint(const std::string& dir) {
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, point;
    fields >> id >> parent >> dev >> root >> point;
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos || Unescape(point) != dir) continue;
    std::istringstream rest(line.substr(dash + 3));
    std::string type;
    rest >> type;
    if (type == "fuse" || type.rfind("fuse.", 0) == 0) return true;
  }
  return false;
}

// `dir` with its parent resolved (symlinks, "..") but without a system call on `dir` itself.
std::string MountPointPath(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::absolute(fs::path(dir), ec).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  fs::path parent = fs::canonical(p.parent_path(), ec);
  return ec ? p.string() : (parent / p.filename()).string();
}

// True when the FUSE server behind `dir` is gone: statfs is never answered from a cache, so a
// dead connection says ENOTCONN at once. A server that does not answer within two seconds is
// left alone (it may be busy; it is not known to be dead).
bool ServerIsDead(const std::string& dir) {
  auto probe = std::make_shared<std::promise<int>>();
  std::future<int> result = probe->get_future();
  std::thread([probe, dir] {
    struct statfs st;
    probe->set_value(::statfs(dir.c_str(), &st) == 0 ? 0 : errno);
  }).detach();
  if (result.wait_for(std::chrono::seconds(2)) != std::future_status::ready) return false;
  return result.get() == ENOTCONN;
}

}  // namespace

// Run without a shell, so `dir` is never parsed.
bool FusermountUnmount(const std::string& dir, bool lazy) {
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    if (lazy) {
      execlp("fusermount3", "fusermount3", "-u", "-z", "--", dir.c_str(),
             static_cast<char*>(nullptr));
    } else {
      execlp("fusermount3", "fusermount3", "-u", "--", dir.c_str(), static_cast<char*>(nullptr));
    }
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

absl::Status DetachStaleMount(const std::string& dir) {
  const std::string point = MountPointPath(dir);
  // Dead mounts may be stacked (each earlier mount died in turn): clear every one, bounded.
  for (int layer = 0; layer < 16; ++layer) {
    if (!FuseMountedAtPoint(point) || !ServerIsDead(point)) return absl::OkStatus();
    if (::umount2(point.c_str(), MNT_DETACH) == 0) continue;
    const int err = errno;
    if (!FusermountUnmount(point, /*lazy=*/true)) {
      return absl::FailedPreconditionError(absl::StrCat(
          dir, ": a dead FUSE mount is still there and cannot be detached (", strerror(err),
          "); run `fusermount3 -u -z ", dir, "` or `umount -l ", dir, "`"));
    }
  }
  return absl::FailedPreconditionError(
      absl::StrCat(dir, ": dead FUSE mounts are still there after detaching 16"));
}

bool FuseMountedAt(const std::string& dir) { return FuseMountedAtPoint(MountPointPath(dir)); }

}  // namespace modelfs
