// RunCredentialProcess: posix_spawn with stdin and stdout on pipes, poll() until the program
// closes stdout and exits or the timeout passes.
#include "core/registry/credential_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace modelfs {
namespace {

constexpr size_t kMaxOutput = 1 << 20;

// Closes the fds it holds when it goes out of scope.
struct Fds {
  int in_w = -1;
  int out_r = -1;
  ~Fds() {
    if (in_w >= 0) close(in_w);
    if (out_r >= 0) close(out_r);
  }
};

// Writes what it can of `data` from `done` to the non-blocking `fd` without a SIGPIPE reaching
// the process when the program has closed its stdin (SIGPIPE is blocked on this thread for the
// write and a pending one consumed). Returns false when the program will read no more.
bool WriteSomeNoSigpipe(int fd, const std::string& data, size_t& done) {
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  bool ok = true;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) {
      ok = false;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (!ok && errno == EPIPE) {
    struct timespec zero = {0, 0};
    while (sigtimedwait(&pipe_set, nullptr, &zero) == SIGPIPE) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return ok;
}

}  // namespace

absl::StatusOr<CredentialProcessResult> RunCredentialProcess(const CredentialProcess& p) {
  if (p.argv.empty()) return absl::InvalidArgumentError(absl::StrCat(p.label, ": no program"));
  int in_pipe[2], out_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat(p.label, ": pipe: ", std::strerror(errno)));
  }
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    close(in_pipe[0]);
    close(in_pipe[1]);
    return absl::InternalError(absl::StrCat(p.label, ": pipe: ", std::strerror(errno)));
  }
  Fds fds{in_pipe[1], out_pipe[0]};

  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : p.env) env[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = p.argv;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_pipe[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  bool search_path = p.argv[0].find('/') == std::string::npos;
  int rc = search_path ? posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), envp.data())
                       : posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(in_pipe[0]);
  close(out_pipe[1]);
  if (rc != 0) {
    return absl::NotFoundError(absl::StrCat(p.label, ": cannot run ", p.argv[0], ": ",
                                            std::strerror(rc),
                                            search_path ? " (looked up on $PATH)" : ""));
  }

  fcntl(fds.in_w, F_SETFL, fcntl(fds.in_w, F_GETFL) | O_NONBLOCK);
  size_t written = 0;
  auto close_stdin = [&fds] {
    if (fds.in_w >= 0) close(fds.in_w);
    fds.in_w = -1;
  };
  if (!WriteSomeNoSigpipe(fds.in_w, p.stdin_data, written) || written == p.stdin_data.size()) {
    close_stdin();
  }

  CredentialProcessResult result;
  absl::Time deadline = absl::Now() + p.timeout;
  bool timed_out = false, too_long = false;
  while (true) {
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      timed_out = true;
      break;
    }
    struct pollfd pfds[2] = {{fds.out_r, POLLIN, 0}, {fds.in_w, POLLOUT, 0}};
    int n =
        poll(pfds, fds.in_w >= 0 ? 2 : 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) continue;  // the deadline check above ends the loop
    if (fds.in_w >= 0 && pfds[1].revents != 0) {
      if (!WriteSomeNoSigpipe(fds.in_w, p.stdin_data, written) || written == p.stdin_data.size()) {
        close_stdin();
      }
    }
    if (pfds[0].revents == 0) continue;
    char buf[4096];
    ssize_t got = read(fds.out_r, buf, sizeof(buf));
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) break;  // EOF: the program closed stdout (usually by exiting)
    if (result.stdout.size() + static_cast<size_t>(got) > kMaxOutput) {
      too_long = true;
      break;
    }
    result.stdout.append(buf, static_cast<size_t>(got));
  }
  close_stdin();
  // Wait for the exit, still within the deadline (a program may close stdout and linger).
  int status = 0;
  while (!timed_out && !too_long) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) break;
    if (absl::Now() >= deadline) {
      timed_out = true;
      break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  if (timed_out || too_long) {
    kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    result.stdout.clear();
    if (timed_out) {
      return absl::DeadlineExceededError(
          absl::StrCat(p.label, ": ", p.argv[0], " did not finish within ",
                       absl::FormatDuration(p.timeout), " and was killed"));
    }
    return absl::InternalError(
        absl::StrCat(p.label, ": ", p.argv[0], " wrote more than 1 MiB and was killed"));
  }
  if (WIFSIGNALED(status)) {
    result.stdout.clear();
    return absl::InternalError(
        absl::StrCat(p.label, ": ", p.argv[0], " was killed by signal ", WTERMSIG(status)));
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 255;
  // posix_spawnp reports a program it could not exec as exit 127 (glibc's child exits so).
  if (result.exit_code == 127 && result.stdout.empty()) {
    return absl::NotFoundError(absl::StrCat(p.label, ": cannot run ", p.argv[0],
                                            search_path ? " (not found on $PATH)" : ""));
  }
  return result;
}

}  // namespace modelfs
