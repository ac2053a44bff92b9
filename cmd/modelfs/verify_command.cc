// `modelfs verify DIR`: checks a directory against its modelfs.lock.json, offline.
// `modelfs verify REF`: checks an image's signatures against a policy or a key
// (trust_commands.cc). An existing directory is a DIR; anything else is a reference.
#include <cstdio>
#include <filesystem>
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
  auto r = std::make_shared<VerifyRefCli>();
  CLI::App* cmd = app.add_subcommand(
      "verify",
      "DIR: check a directory against its modelfs.lock.json (offline), every file's size and "
      "SHA-256. REF: check an image's signatures against a policy (--policy) or a key (--key)");
  cmd->add_option("TARGET", c->dir,
                  "Directory written by `modelfs fetch`, or registry/repo:tag (@sha256:...)")
      ->required();
  cmd->add_option("--policy", r->policy, "REF: containers-policy.json to evaluate");
  cmd->add_option("--key", r->key,
                  "REF: ECDSA P-256 public key (PEM) a signature must verify with");
  cmd->add_option("--attestation", r->attestation,
                  "REF: check the image's signed attestations of this kind (equivalence) with "
                  "--key, instead of its signatures");
  cmd->add_flag("--plain-http", r->plain_http,
                "REF: talk plain HTTP to this registry (only for hosts you trust, e.g. loopback)");
  cmd->add_option("--hosts-dir", r->hosts_dir, "REF: containerd-style certs.d directory");
  cmd->add_option("--docker-config", r->docker_config, "REF: docker config.json with credentials");
  cmd->add_flag("--json", c->json, "Print JSON");
  cmd->footer(
      "Exit codes: DIR: 0 every locked file matches; 1 a file is missing, not a regular file, or "
      "has other bytes; 2 no or malformed lock file. REF: 0 accepted; 1 refused (no signature, no "
      "key matched, identity mismatch, bad payload, signatures not fetched, rejected; with "
      "--attestation: no attestation, no key matched, subject mismatch, not equivalent); 2 bad "
      "reference, policy or key");
  cmd->callback([c, r, &ctx] {
    std::error_code ec;
    if (std::filesystem::is_directory(c->dir, ec)) {
      if (!r->policy.empty() || !r->key.empty() || !r->attestation.empty()) {
        ctx.status = absl::InvalidArgumentError(
            absl::StrCat("verify ", c->dir,
                         ": a directory is checked against its lock file; --policy and "
                         "--key apply to an image reference"));
        return;
      }
      ctx.status = RunVerify(*c);
      return;
    }
    r->ref = c->dir;
    r->json = c->json;
    ctx.status = r->attestation.empty() ? RunVerifyReference(*r) : RunVerifyAttestation(*r);
  });
}

}  // namespace modelfs::cli
