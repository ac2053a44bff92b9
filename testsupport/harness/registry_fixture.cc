#include "testsupport/harness/registry_fixture.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/status/status_macros.h"
#include "nlohmann/json.hpp"

#ifndef MODELFS_HARNESS_DIR
#error "MODELFS_HARNESS_DIR must name testsupport/harness"
#endif

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<std::string> MakeWorkDir(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = absl::StrCat(tmp && *tmp ? tmp : "/tmp", "/", prefix, "-XXXXXX");
  if (mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", tmpl, ": ", std::strerror(errno)));
  }
  return tmpl;
}

// Runs a command to completion with its stdout captured. Arguments are not secrets here
// (test-only passwords), so a failure may quote the command.
absl::StatusOr<std::string> RunCapture(const std::vector<std::string>& argv) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return absl::InternalError("pipe()");
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork()");
  if (pid == 0) {
    dup2(pipefd[1], 1);
    close(pipefd[0]);
    close(pipefd[1]);
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, 2);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(pipefd[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(pipefd[0], buf, sizeof(buf))) > 0) out.append(buf, n);
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("command failed (", absl::StrJoin(argv, " "), "), status ", status));
  }
  return out;
}

// Waits for a helper to write its listening port into `port_file`.
absl::StatusOr<int> WaitForPortFile(const std::string& port_file, ChildProcess* process,
                                    absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int port = 0;
    std::string text = ReadFileOrEmpty(port_file);
    if (!text.empty() && absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &port)) return port;
    if (!process->running()) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("helper did not start; log:\n", ReadFileOrEmpty(process->log_path())));
}

}  // namespace

absl::StatusOr<int> FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket()");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return absl::InternalError("bind/getsockname on 127.0.0.1:0");
  }
  int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

absl::StatusOr<std::string> HttpGetForTest(const std::string& url, long* status) {
  CURL* h = curl_easy_init();
  if (h == nullptr) return absl::InternalError("curl_easy_init");
  std::string body;
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 2000L);
  curl_easy_setopt(
      h, CURLOPT_WRITEFUNCTION, +[](char* p, size_t s, size_t n, void* u) -> size_t {
        static_cast<std::string*>(u)->append(p, s * n);
        return s * n;
      });
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
  CURLcode rc = curl_easy_perform(h);
  long code = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  curl_easy_cleanup(h);
  if (rc != CURLE_OK) {
    return absl::UnavailableError(absl::StrCat("GET ", url, ": ", curl_easy_strerror(rc)));
  }
  if (status != nullptr) *status = code;
  return body;
}

// ---------------------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(
    const std::vector<std::string>& argv, const std::string& log_path, bool append) {
  std::unique_ptr<ChildProcess> p(new ChildProcess());
  p->log_path_ = log_path;
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork()");
  if (pid == 0) {
    int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  p->pid_ = pid;
  return p;
}

bool ChildProcess::running() {
  if (pid_ <= 0) return false;
  int status = 0;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

void ChildProcess::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (absl::Now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

ChildProcess::~ChildProcess() { Stop(); }

// ---------------------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<RegistryFixture>> RegistryFixture::Start(
    RegistryFixtureOptions options) {
  const std::string registry_bin = "/usr/bin/docker-registry";
  if (!fs::exists(registry_bin)) {
    return absl::FailedPreconditionError(
        "docker-registry is not installed (/usr/bin/docker-registry)");
  }
  std::unique_ptr<RegistryFixture> f(new RegistryFixture());
  f->options_ = options;
  ASSIGN_OR_RETURN(f->work_dir_, MakeWorkDir("modelfs-registry"));
  f->storage_dir_ = f->work_dir_ + "/storage";
  fs::create_directories(f->storage_dir_);
  if (!options.seed_storage_dir.empty()) {
    std::error_code ec;
    fs::copy(options.seed_storage_dir, f->storage_dir_, fs::copy_options::recursive, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat("registry fixture: cannot copy ",
                                              options.seed_storage_dir, ": ", ec.message()));
    }
  }
  ASSIGN_OR_RETURN(int port, FreeLoopbackPort());
  f->host_port_ = absl::StrCat("127.0.0.1:", port);

  std::string auth_yaml;
  if (options.auth == RegistryFixtureOptions::Auth::kHtpasswd) {
    ASSIGN_OR_RETURN(std::string line,
                     RunCapture({"htpasswd", "-Bbn", options.username, options.password}));
    std::string path = f->work_dir_ + "/htpasswd";
    std::ofstream(path) << absl::StripAsciiWhitespace(line) << "\n";
    auth_yaml = absl::StrCat("auth:\n  htpasswd:\n    realm: modelfs-test\n    path: ", path, "\n");
  } else if (options.auth == RegistryFixtureOptions::Auth::kToken) {
    std::string key = f->work_dir_ + "/token-key.pem";
    std::string cert = f->work_dir_ + "/token-cert.pem";
    RETURN_IF_ERROR(
        RunCapture({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", cert, "-days", "2", "-subj", "/CN=modelfs-test-token-issuer"})
            .status());
    std::string port_file = f->work_dir_ + "/token.port";
    std::vector<std::string> argv = {
        "python3",      std::string(MODELFS_HARNESS_DIR) + "/token_server.py",
        "--key",        key,
        "--cert",       cert,
        "--issuer",     kTokenIssuer,
        "--service",    kTokenService,
        "--user",       options.username,
        "--password",   options.password,
        "--expires-in", absl::StrCat(options.token_expires_in),
        "--port-file",  port_file};
    if (options.anonymous_pull) argv.push_back("--anonymous-pull");
    if (!options.password_file.empty()) {
      argv.insert(argv.end(), {"--password-file", options.password_file});
    }
    if (!options.refresh_token.empty()) {
      argv.insert(argv.end(), {"--refresh-token", options.refresh_token});
    }
    ASSIGN_OR_RETURN(f->token_server_, ChildProcess::Spawn(argv, f->work_dir_ + "/token.log"));
    ASSIGN_OR_RETURN(int token_port,
                     WaitForPortFile(port_file, f->token_server_.get(), absl::Seconds(20)));
    f->token_url_ = absl::StrCat("http://127.0.0.1:", token_port);
    auth_yaml = absl::StrCat("auth:\n  token:\n    realm: ", f->token_url_, "/token\n",
                             "    service: ", kTokenService, "\n    issuer: ", kTokenIssuer,
                             "\n    rootcertbundle: ", cert, "\n");
  }

  std::string config = absl::StrCat(
      "version: 0.1\n"
      "log:\n  level: error\n  accesslog:\n    disabled: ",
      options.access_log ? "false" : "true",
      "\n"
      "storage:\n  filesystem:\n    rootdirectory: ",
      f->storage_dir_, "\n",
      "  delete:\n    enabled: true\n"
      "  maintenance:\n    uploadpurging:\n      enabled: false\n"
      "http:\n  addr: ",
      f->host_port_, "\n  secret: modelfs-test-secret\n", auth_yaml);
  if (!options.proxy_remote_url.empty()) {
    absl::StrAppend(&config, "proxy:\n  remoteurl: ", options.proxy_remote_url, "\n");
  }
  std::string config_path = f->work_dir_ + "/config.yml";
  std::ofstream(config_path) << config;

  RETURN_IF_ERROR(f->StartRegistryProcess(/*append=*/false));
  return f;
}

absl::Status RegistryFixture::StartRegistryProcess(bool append) {
  ASSIGN_OR_RETURN(registry_, ChildProcess::Spawn(
                                  {"/usr/bin/docker-registry", "serve", work_dir_ + "/config.yml"},
                                  log_path(), append));
  absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (true) {
    long status = 0;
    absl::StatusOr<std::string> r =
        HttpGetForTest(absl::StrCat("http://", host_port_, "/v2/"), &status);
    if (r.ok() && (status == 200 || status == 401)) return absl::OkStatus();
    if (!registry_->running() || absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("docker-registry did not come up on ",
                                                      host_port_, "; log:\n",
                                                      ReadFileOrEmpty(log_path())));
    }
    absl::SleepFor(absl::Milliseconds(25));
  }
}

void RegistryFixture::Stop() {
  if (registry_ != nullptr) registry_->Stop();
}

absl::Status RegistryFixture::Restart() {
  Stop();
  return StartRegistryProcess(/*append=*/true);
}

bool RegistryFixture::running() const { return registry_ != nullptr && registry_->running(); }

RegistryFixture::~RegistryFixture() {
  registry_.reset();
  token_server_.reset();
  if (!work_dir_.empty()) {
    std::error_code ec;
    fs::remove_all(work_dir_, ec);
  }
}

std::string RegistryFixture::BlobDataPath(const Digest& digest) const {
  std::string hex(digest.hex());
  return absl::StrCat(storage_dir_, "/docker/registry/v2/blobs/sha256/", hex.substr(0, 2), "/", hex,
                      "/data");
}

absl::StatusOr<int> RegistryFixture::TokenRequestCount() const {
  if (token_url_.empty()) return absl::FailedPreconditionError("no token server");
  ASSIGN_OR_RETURN(std::string body, HttpGetForTest(token_url_ + "/stats"));
  nlohmann::json doc = nlohmann::json::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.contains("token_requests")) {
    return absl::InternalError("bad /stats answer: " + body);
  }
  return doc["token_requests"].get<int>();
}

// ---------------------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<FaultProxy>> FaultProxy::Start(const std::string& upstream_host_port,
                                                              FaultProxyOptions options) {
  std::unique_ptr<FaultProxy> p(new FaultProxy());
  ASSIGN_OR_RETURN(p->work_dir_, MakeWorkDir("modelfs-fault-proxy"));
  std::string port_file = p->work_dir_ + "/port";
  std::vector<std::string> argv = {
      "python3",       std::string(MODELFS_HARNESS_DIR) + "/fault_proxy.py",
      "--upstream",    upstream_host_port,
      "--port-file",   port_file,
      "--fail-first",  absl::StrCat(options.fail_first),
      "--fail-status", absl::StrCat(options.fail_status)};
  if (options.retry_after_seconds > 0) {
    argv.insert(argv.end(), {"--retry-after", absl::StrCat(options.retry_after_seconds)});
  }
  if (!options.fail_path.empty()) argv.insert(argv.end(), {"--fail-path", options.fail_path});
  if (options.ignore_range) argv.push_back("--ignore-range");
  if (options.redirect_blobs) argv.push_back("--redirect-blobs");
  if (options.read_only) argv.push_back("--read-only");
  if (options.storage_uses > 0) {
    argv.insert(argv.end(), {"--storage-uses", absl::StrCat(options.storage_uses)});
  }
  if (options.blob_fault != FaultProxyOptions::BlobFault::kNone) {
    argv.insert(argv.end(), {"--blob-fault", BlobFaultName(options.blob_fault),
                             "--blob-fault-first", absl::StrCat(options.blob_fault_first),
                             "--blob-fault-bytes", absl::StrCat(options.blob_fault_bytes),
                             "--blob-fault-offset", absl::StrCat(options.blob_fault_offset),
                             "--blob-fault-from", absl::StrCat(options.blob_fault_from)});
    if (!options.blob_fault_path.empty()) {
      argv.insert(argv.end(), {"--blob-fault-path", options.blob_fault_path});
    }
  }
  if (options.rate_bytes_per_s > 0) {
    argv.insert(argv.end(), {"--rate", absl::StrCat(options.rate_bytes_per_s)});
  }
  if (options.bearer_max_age_s > 0) {
    argv.insert(argv.end(), {"--bearer-max-age", absl::StrCat(options.bearer_max_age_s)});
  }
  ASSIGN_OR_RETURN(p->process_, ChildProcess::Spawn(argv, p->work_dir_ + "/proxy.log"));
  ASSIGN_OR_RETURN(int port, WaitForPortFile(port_file, p->process_.get(), absl::Seconds(20)));
  p->host_port_ = absl::StrCat("127.0.0.1:", port);
  return p;
}

const char* BlobFaultName(FaultProxyOptions::BlobFault fault) {
  using F = FaultProxyOptions::BlobFault;
  switch (fault) {
    case F::kNone:
      return "";
    case F::kReset:
      return "reset";
    case F::kTruncate:
      return "truncate";
    case F::kStall:
      return "stall";
    case F::kCorrupt:
      return "corrupt";
    case F::kWrongRange:
      return "wrong-range";
  }
  return "";
}

absl::Status FaultProxy::ClearBlobFault() const {
  long status = 0;
  ASSIGN_OR_RETURN(std::string body,
                   HttpGetForTest(absl::StrCat("http://", host_port_, "/__clear-faults"), &status));
  if (status != 200) return absl::InternalError(absl::StrCat("/__clear-faults: HTTP ", status));
  return absl::OkStatus();
}

absl::Status FaultProxy::SetBlobFault(FaultProxyOptions::BlobFault fault, int first,
                                      const std::string& path, int64_t bytes, int64_t offset,
                                      int64_t from) const {
  // The path is a substring such as "/blobs/sha256:<hex>": ':' and '/' may stand in a query.
  std::string url = absl::StrCat("http://", host_port_, "/__set-faults?mode=", BlobFaultName(fault),
                                 "&first=", first, "&bytes=", bytes, "&offset=", offset,
                                 "&from=", from, "&path=", path.empty() ? "/blobs/" : path);
  long status = 0;
  ASSIGN_OR_RETURN(std::string body, HttpGetForTest(url, &status));
  if (status != 200) return absl::InternalError(absl::StrCat("/__set-faults: HTTP ", status));
  return absl::OkStatus();
}

FaultProxy::~FaultProxy() {
  process_.reset();
  if (!work_dir_.empty()) {
    std::error_code ec;
    fs::remove_all(work_dir_, ec);
  }
}

absl::StatusOr<int> FaultProxy::Stat(const std::string& name) const {
  ASSIGN_OR_RETURN(std::string body,
                   HttpGetForTest(absl::StrCat("http://", host_port_, "/__stats")));
  nlohmann::json doc = nlohmann::json::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.contains(name)) {
    return absl::InternalError(absl::StrCat("no counter ", name, " in ", body));
  }
  return doc[name].get<int>();
}

}  // namespace modelfs::testing
