// RangeServer: runs testsupport/fakes/range_server.py (a threaded HTTP/1.1 file server with
// Range support and fault injection) as a child process for the lifetime of one object.
//
//   TempDir dir;
//   dir.WriteFile("model.safetensors", bytes);
//   ASSERT_OK_AND_ASSIGN(auto server, RangeServer::Start({.root = dir.path()}));
//   ASSERT_OK(server->SetFaults({.fail_first = 1}));  // the next request gets a 503
//   OpenHttpRangeReader(server->Url("model.safetensors"), {});
//   EXPECT_EQ(server->ReadLog().size(), 2);
//
// Starting the Python server costs ~0.1 s; prefer one server per suite and SetFaults()/
// ClearLog() in SetUp() over one server per test.
//
// The script is found through $MODELFS_SOURCE_DIR (set by modelfs_test) or the source tree this
// library was built from. The child exits when the object is destroyed (SIGTERM, then SIGKILL)
// and also when the test process dies (it watches a pipe on its stdin).
//
// Thread safety: Url()/base_url()/port()/ReadLog()/SetFaults() may be called from any thread,
// also while requests are in flight (ReadLog() reads a file the server appends whole lines
// to); ClearLog() must not race with ReadLog().
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs::testing {

// Faults the server injects; the defaults serve files correctly.
struct RangeFaults {
  bool ignore_range = false;                  // always 200 with the whole file
  std::optional<uint64_t> corrupt_offset;     // flip the byte at this offset of every file
  std::optional<uint64_t> reset_after_bytes;  // reset the connection after N body bytes
  int delay_ms = 0;                           // sleep before each answer
  int fail_first = 0;                         // answer fail_status to the next N requests
  int fail_status = 503;
  std::string require_token;  // non-empty: 401 unless "Authorization: Bearer <token>"
  std::string token_realm;    // with require_token: the 401's Bearer realm path, served freely
  std::string redirect_host;  // non-empty: 302 to http://<host>:<port><path> from other hosts
};

struct RangeServerOptions {
  std::filesystem::path root;           // directory to serve (required)
  RangeFaults faults;                   // in force from the first request
  std::vector<std::string> extra_args;  // passed through to range_server.py
};

// One request as the server saw it (a line of its --log).
struct RequestLogEntry {
  std::string method;  // "GET", "HEAD", "PUT"
  std::string path;    // URL path without the query, e.g. "/model.safetensors"
  std::string query;   // the query string without '?', "" when absent
  std::string range;   // the Range header as sent, "" when absent
  int status = 0;
  uint64_t bytes = 0;  // body bytes the response carries (after any reset cut); for a PUT, received
  int conn = 0;        // client port: equal values mean one reused connection
  bool auth = false;   // whether an Authorization header was sent
};

class RangeServer {
 public:
  // Starts the server and waits (up to 10 s) for its "PORT n" line.
  static absl::StatusOr<std::unique_ptr<RangeServer>> Start(const RangeServerOptions& options);
  ~RangeServer();
  RangeServer(const RangeServer&) = delete;
  RangeServer& operator=(const RangeServer&) = delete;

  uint16_t port() const { return port_; }
  // "http://127.0.0.1:<port>" (no trailing slash).
  const std::string& base_url() const { return base_url_; }
  // base_url() + "/" + path (a leading "/" in path is fine).
  std::string Url(const std::string& path) const;

  // Every request so far, in the order the server logged them. Each entry is written before
  // its body is sent, so a request whose response the client has read is always included.
  std::vector<RequestLogEntry> ReadLog() const;
  // Forgets the requests logged so far (ReadLog() then starts from the next one).
  void ClearLog();

  // Replaces every fault at once (RangeFaults{} turns them all off) and restarts the
  // fail_first count. Takes effect for requests that arrive after it returns.
  absl::Status SetFaults(const RangeFaults& faults);

  pid_t pid() const { return pid_; }

 private:
  RangeServer() = default;

  pid_t pid_ = -1;
  int stdin_fd_ = -1;  // write end of the child's stdin; closing it makes the child exit
  uint16_t port_ = 0;
  std::string base_url_;
  std::unique_ptr<TempDir> log_dir_;  // holds the request log
  std::filesystem::path log_path_;
  uint64_t log_skip_ = 0;  // bytes of the log already cleared
};

// Path of range_server.py in the source tree.
std::filesystem::path RangeServerScript();

}  // namespace modelfs::testing
