#include "testsupport/hub/fake_hub_fixture.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/status/status_macros.h"

namespace modelfs::testing {
namespace {

namespace fs = std::filesystem;

std::string Python() {
  const char* env = getenv("MODELFS_PYTHON");
  if (env != nullptr && *env != '\0') return env;
  return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

absl::Status WriteAtomically(const fs::path& path, const std::string& bytes) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << bytes;
    if (!out) return absl::InternalError(absl::StrCat(tmp.string(), ": write failed"));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat(path.string(), ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace

std::string FakeHubScript() {
  const char* env = getenv("MODELFS_SOURCE_DIR");
  const std::string root = env != nullptr && *env != '\0' ? env : MODELFS_SOURCE_DIR_DEFAULT;
  return root + "/testsupport/fakes/fake_hub.py";
}

absl::StatusOr<std::unique_ptr<FakeHub>> FakeHub::Start() {
  std::unique_ptr<FakeHub> hub(new FakeHub());
  std::string tmpl = (fs::temp_directory_path() / "modelfs-fake-hub-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) return absl::InternalError("mkdtemp failed");
  hub->dir_ = tmpl;
  RETURN_IF_ERROR(hub->SetState({{"repos", nlohmann::json::object()}}));
  const std::string port_file = hub->dir_ + "/ports.json";
  ASSIGN_OR_RETURN(
      hub->process_,
      ChildProcess::Spawn({Python(), FakeHubScript(), "--state", hub->dir_ + "/state.json",
                           "--port-file", port_file, "--log", hub->dir_ + "/requests.jsonl"},
                          hub->dir_ + "/fake_hub.log"));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (true) {
    std::ifstream in(port_file);
    if (in) {
      std::stringstream ss;
      ss << in.rdbuf();
      nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
      if (j.is_object() && j.contains("hub") && j.contains("cdn")) {
        hub->endpoint_ = absl::StrCat("http://127.0.0.1:", j["hub"].get<int>());
        hub->cdn_port_ = j["cdn"].get<int>();
        return hub;
      }
    }
    if (!hub->process_->running() || absl::Now() > deadline) {
      std::ifstream log(hub->dir_ + "/fake_hub.log");
      std::stringstream ss;
      ss << log.rdbuf();
      return absl::DeadlineExceededError(absl::StrCat("fake_hub.py did not start: ", ss.str()));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

FakeHub::~FakeHub() {
  if (process_) process_->Stop();
  std::error_code ec;
  if (!dir_.empty()) fs::remove_all(dir_, ec);
}

absl::Status FakeHub::SetState(const nlohmann::json& state) {
  return WriteAtomically(fs::path(dir_) / "state.json", state.dump(2));
}

absl::StatusOr<std::string> FakeHub::WriteCommit(const std::string& name,
                                                 const std::map<std::string, std::string>& files) {
  const fs::path root = fs::path(dir_) / "commits" / name;
  std::error_code ec;
  fs::remove_all(root, ec);
  for (const auto& [path, bytes] : files) {
    const fs::path p = root / path;
    fs::create_directories(p.parent_path(), ec);
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << bytes;
    if (!out) return absl::InternalError(absl::StrCat(p.string(), ": write failed"));
  }
  fs::create_directories(root, ec);
  return root.string();
}

std::vector<FakeHubRequest> FakeHub::ReadLog() const {
  std::vector<FakeHubRequest> out;
  std::ifstream in(dir_ + "/requests.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object()) continue;
    out.push_back({j.value("server", ""), j.value("method", ""), j.value("path", ""),
                   j.value("status", 0), j.value("auth", false)});
  }
  return out;
}

}  // namespace modelfs::testing
