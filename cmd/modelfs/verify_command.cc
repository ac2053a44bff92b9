// `modelfs verify DIR`: checks a directory against its modelfs.lock.json, offline.
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "cmd/modelfs/cli.h"
#include "core/hub/lock_file.h"
#include "core/status/status_macros.h"
#include "core/text/escape.h"
#include "nlohmann/json.hpp"

namespace modelfs::cli {
namespace {

struct VerifyCli {
  std::string dir;
  bool json = false;
};

absl::Status RunVerify(const VerifyCli& c) {
  ASSIGN_OR_RETURN(VerifyReport r, VerifyDirectory(c.dir));
  int bad = 0;
  for (const LockCheck& f : r.files) bad += f.state != LockCheck::State::kOk;
  if (c.json) {
    nlohmann::json files = nlohmann::json::array();
    for (const LockCheck& f : r.files) {
      files.push_back(
          {{"path", f.path},
           {"state", std::string(LockCheckStateName(f.state))},
           {"size", f.size},
           {"expected_size", f.expected_size},
           {"sha256", f.sha256.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.sha256)},
           {"expected_sha256", f.expected_sha256}});
    }
    nlohmann::json j = {{"repo", r.lock.repo}, {"commit", r.lock.commit}, {"ok", r.ok()},
                        {"files", files},      {"extra", r.extra},        {"bytes", r.bytes}};
    printf("%s\n", j.dump(2).c_str());
  } else {
    for (const LockCheck& f : r.files) {
      if (f.state == LockCheck::State::kOk) {
        printf("ok       %s %14s  %s\n", f.sha256.substr(0, 12).c_str(), WithCommas(f.size).c_str(),
               EscapeUntrusted(f.path).c_str());
      } else {
        printf("FAILED   %s: %s\n", EscapeUntrusted(f.path).c_str(),
               std::string(LockCheckStateName(f.state)).c_str());
      }
    }
    for (const std::string& e : r.extra) {
      printf("extra    %s (not in the lock)\n", EscapeUntrusted(e).c_str());
    }
    printf("%s@%s: %zu of %zu files match the lock\n", EscapeUntrusted(r.lock.repo).c_str(),
           r.lock.commit.c_str(), r.files.size() - bad, r.files.size());
  }
  if (bad == 0) return absl::OkStatus();
  for (const LockCheck& f : r.files) {
    if (f.state == LockCheck::State::kOk) continue;
    std::string detail;
    if (f.state == LockCheck::State::kSizeMismatch) {
      detail = absl::StrCat(": ", f.size, " bytes, the lock says ", f.expected_size);
    } else if (f.state == LockCheck::State::kDigestMismatch) {
      detail = absl::StrCat(": sha256 ", f.sha256, ", the lock says ", f.expected_sha256);
    }
    return absl::DataLossError(absl::StrCat(c.dir, ": ", bad, " file(s) do not match ",
                                            "modelfs.lock.json; first: ", f.path, " ",
                                            std::string(LockCheckStateName(f.state)), detail));
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterVerify(CLI::App& app, Context& ctx) {
  auto c = std::make_shared<VerifyCli>();
  CLI::App* cmd = app.add_subcommand(
      "verify",
      "Check a directory against its modelfs.lock.json (offline): every file's size and SHA-256");
  cmd->add_option("DIR", c->dir, "Directory written by `modelfs fetch`")->required();
  cmd->add_flag("--json", c->json, "Print JSON");
  cmd->footer(
      "Exit codes: 0 every locked file matches; 1 a file is missing, not a regular file, or has "
      "other bytes; 2 no or malformed lock file");
  cmd->callback([c, &ctx] { ctx.status = RunVerify(*c); });
}

}  // namespace modelfs::cli
