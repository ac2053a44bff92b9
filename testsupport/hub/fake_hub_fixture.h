// FakeHub: runs testsupport/fakes/fake_hub.py (the Hugging Face Hub's HTTP behaviour plus a
// "CDN" on another port, both on 127.0.0.1) for one test or suite, with a state file the test
// rewrites between calls (see the script's docstring for the state's shape).
//
//   ASSERT_OK_AND_ASSIGN(auto hub, FakeHub::Start());
//   ASSERT_OK_AND_ASSIGN(std::string dir, hub->WriteCommit(kSha, {{"config.json", "{}"}}));
//   ASSERT_OK(hub->SetState({{"repos", {{"org/m", {{"commits", {{kSha, dir}}}}}}}}));
//   ... HF_ENDPOINT=hub->endpoint() ...
//
// The process is started and stopped (by PID) by the object.
//
// Thread safety: construct, SetState and destroy on one thread; ReadLog from any.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "testsupport/harness/registry_fixture.h"

namespace modelfs::testing {

struct FakeHubRequest {
  std::string server;  // "hub" or "cdn"
  std::string method;
  std::string path;  // with the query
  int status = 0;
  bool auth = false;  // an Authorization header was sent
};

class FakeHub {
 public:
  // Starts with an empty state ({"repos": {}}) and waits (up to 10 s) for both ports.
  static absl::StatusOr<std::unique_ptr<FakeHub>> Start();
  ~FakeHub();

  // "http://127.0.0.1:PORT": the value for HF_ENDPOINT.
  const std::string& endpoint() const { return endpoint_; }
  int cdn_port() const { return cdn_port_; }
  // A directory of the fixture's own, removed with it.
  const std::string& dir() const { return dir_; }

  // Replaces the state file (atomically); the hub reads it on every request.
  absl::Status SetState(const nlohmann::json& state);
  // Writes `files` (path -> bytes) under dir()/commits/<name>/ and returns that directory,
  // for a state's "commits".
  absl::StatusOr<std::string> WriteCommit(const std::string& name,
                                          const std::map<std::string, std::string>& files);

  std::vector<FakeHubRequest> ReadLog() const;

 private:
  FakeHub() = default;
  std::string dir_;
  std::string endpoint_;
  int cdn_port_ = 0;
  std::unique_ptr<ChildProcess> process_;
};

// Path of fake_hub.py in the source tree ($MODELFS_SOURCE_DIR, else the tree built from).
std::string FakeHubScript();

}  // namespace modelfs::testing
