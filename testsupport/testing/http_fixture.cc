#include "testsupport/testing/http_fixture.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/status/status_macros.h"
#include "nlohmann/json.hpp"

extern char** environ;

namespace modelfs::testing {
namespace {

constexpr auto kStartTimeout = std::chrono::seconds(10);

void WaitOrKill(pid_t pid) {
  kill(pid, SIGTERM);
  for (int i = 0; i < 200; ++i) {  // up to 2 s for a clean exit
    int status;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) return;
    struct timespec ts = {0, 10'000'000};
    nanosleep(&ts, nullptr);
  }
  kill(pid, SIGKILL);
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

// Reads one line from fd within the deadline.
absl::StatusOr<std::string> ReadLine(int fd, std::chrono::steady_clock::time_point deadline) {
  std::string line;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return absl::DeadlineExceededError("range_server.py printed no PORT line in time");
    }
    struct pollfd p = {fd, POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char c;
    ssize_t n = read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError("range_server.py exited before printing its port");
    if (c == '\n') return line;
    line.push_back(c);
  }
}

// The system interpreter first: PATH may hold shims (pyenv) that add a second to each start.
std::string PythonInterpreter() {
  const char* env = getenv("MODELFS_PYTHON");
  if (env != nullptr && *env != '\0') return env;
  if (access("/usr/bin/python3", X_OK) == 0) return "/usr/bin/python3";
  return "python3";
}

}  // namespace

std::filesystem::path RangeServerScript() {
  const char* env = getenv("MODELFS_SOURCE_DIR");
  std::filesystem::path root = (env != nullptr && *env != '\0') ? env : MODELFS_SOURCE_DIR_DEFAULT;
  return root / "testsupport" / "fakes" / "range_server.py";
}

absl::StatusOr<std::unique_ptr<RangeServer>> RangeServer::Start(const RangeServerOptions& o) {
  if (o.root.empty()) return absl::InvalidArgumentError("RangeServerOptions.root is required");
  std::unique_ptr<RangeServer> s(new RangeServer());
  s->log_dir_ = std::make_unique<TempDir>();
  s->log_path_ = s->log_dir_->Join("requests.jsonl");

  const std::string python = PythonInterpreter();
  std::vector<std::string> args = {python,
                                   RangeServerScript().string(),
                                   "--root",
                                   o.root.string(),
                                   "--log",
                                   s->log_path_.string(),
                                   "--exit-on-stdin-eof"};
  const RangeFaults& f = o.faults;
  if (f.ignore_range) args.push_back("--ignore-range");
  if (f.corrupt_offset)
    args.insert(args.end(), {"--corrupt-offset", std::to_string(*f.corrupt_offset)});
  if (f.reset_after_bytes) {
    args.insert(args.end(), {"--reset-after-bytes", std::to_string(*f.reset_after_bytes)});
  }
  if (f.delay_ms > 0) args.insert(args.end(), {"--delay-ms", std::to_string(f.delay_ms)});
  if (f.fail_first > 0) {
    args.insert(args.end(), {"--fail-first", std::to_string(f.fail_first), "--fail-status",
                             std::to_string(f.fail_status)});
  }
  if (!f.require_token.empty()) args.insert(args.end(), {"--require-token", f.require_token});
  if (!f.token_realm.empty()) args.insert(args.end(), {"--token-realm", f.token_realm});
  if (!f.redirect_host.empty()) args.insert(args.end(), {"--redirect-host", f.redirect_host});
  args.insert(args.end(), o.extra_args.begin(), o.extra_args.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) return absl::InternalError(strerror(errno));
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    return absl::InternalError(strerror(errno));
  }
  // posix_spawn is fork+exec without running our code in the child (safe with threads).
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  pid_t pid;
  int rc = posix_spawnp(&pid, python.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(in[0]);
  close(out[1]);
  if (rc != 0) {
    close(in[1]);
    close(out[0]);
    return absl::InternalError(absl::StrCat("spawning ", python, ": ", strerror(rc)));
  }
  s->pid_ = pid;
  s->stdin_fd_ = in[1];

  absl::StatusOr<std::string> line =
      ReadLine(out[0], std::chrono::steady_clock::now() + kStartTimeout);
  close(out[0]);                         // the server prints nothing after its port
  if (!line.ok()) return line.status();  // the destructor stops the child
  int port = 0;
  if (line->rfind("PORT ", 0) != 0 || !absl::SimpleAtoi(line->substr(5), &port) || port <= 0 ||
      port > 65535) {
    return absl::InternalError("range_server.py printed '" + *line + "' instead of 'PORT n'");
  }
  s->port_ = static_cast<uint16_t>(port);
  s->base_url_ = absl::StrCat("http://127.0.0.1:", port);
  return s;
}

RangeServer::~RangeServer() {
  if (pid_ > 0) WaitOrKill(pid_);
  if (stdin_fd_ >= 0) close(stdin_fd_);
}

std::string RangeServer::Url(const std::string& path) const {
  if (!path.empty() && path[0] == '/') return base_url_ + path;
  return base_url_ + "/" + path;
}

std::vector<RequestLogEntry> RangeServer::ReadLog() const {
  std::vector<RequestLogEntry> entries;
  std::ifstream in(log_path_, std::ios::binary);
  if (!in) return entries;
  in.seekg(static_cast<std::streamoff>(log_skip_));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) continue;
    RequestLogEntry e;
    e.method = j.value("method", "");
    e.path = j.value("path", "");
    e.query = j.value("query", "");
    if (j.contains("range") && j["range"].is_string()) e.range = j["range"].get<std::string>();
    e.status = j.value("status", 0);
    e.bytes = j.value("bytes", uint64_t{0});
    e.conn = j.value("conn", 0);
    e.auth = j.value("auth", false);
    entries.push_back(std::move(e));
  }
  return entries;
}

absl::Status RangeServer::SetFaults(const RangeFaults& f) {
  nlohmann::json j = {{"ignore_range", f.ignore_range},
                      {"delay_ms", f.delay_ms},
                      {"fail_first", f.fail_first},
                      {"fail_status", f.fail_status}};
  if (f.corrupt_offset) j["corrupt_offset"] = *f.corrupt_offset;
  if (f.reset_after_bytes) j["reset_after_bytes"] = *f.reset_after_bytes;
  if (!f.require_token.empty()) j["require_token"] = f.require_token;
  if (!f.token_realm.empty()) j["token_realm"] = f.token_realm;
  if (!f.redirect_host.empty()) j["redirect_host"] = f.redirect_host;
  const std::string body = j.dump();
  const std::string request = absl::StrCat(
      "PUT /__faults HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: ",
      body.size(), "\r\n\r\n", body);

  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  struct sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port_);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  absl::Status status = absl::OkStatus();
  if (connect(fd, reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)) != 0) {
    status = absl::UnavailableError(absl::StrCat("connect to range_server: ", strerror(errno)));
  }
  for (size_t done = 0; status.ok() && done < request.size();) {
    ssize_t n = write(fd, request.data() + done, request.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) status = absl::UnavailableError("writing to range_server failed");
    if (n > 0) done += static_cast<size_t>(n);
  }
  char buf[512];
  while (status.ok()) {  // the server closes the connection after its answer
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    response.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  RETURN_IF_ERROR(status);
  if (response.rfind("HTTP/1.1 200", 0) != 0) {
    return absl::InternalError("range_server refused the faults: " + response);
  }
  return absl::OkStatus();
}

void RangeServer::ClearLog() {
  std::error_code ec;
  uintmax_t size = std::filesystem::file_size(log_path_, ec);
  log_skip_ = ec ? 0 : size;
}

}  // namespace modelfs::testing
