// `modelfs digest FILE [--expect DIGEST] [--json]`: SHA-256 of a file as an OCI digest; with
// --expect, a mismatch exits 1.
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "cmd/modelfs/cli.h"
#include "core/oci/digest.h"
#include "core/status/status_macros.h"
#include "nlohmann/json.hpp"

namespace modelfs::cli {
namespace {

struct DigestOptions {
  std::string file;
  std::string expect;
  bool json = false;
};

absl::Status RunDigest(const DigestOptions& o) {
  std::optional<Digest> expected;
  if (!o.expect.empty()) {
    std::string e = o.expect.find(':') == std::string::npos ? "sha256:" + o.expect : o.expect;
    ASSIGN_OR_RETURN(expected, Digest::Parse(e));
  }
  uint64_t size = 0;
  ASSIGN_OR_RETURN(Digest d, DigestFile(o.file, &size));
  bool match = !expected || *expected == d;
  if (o.json) {
    nlohmann::json j = {{"path", o.file}, {"digest", d.str()}, {"size", size}};
    if (expected) {
      j["expected"] = expected->str();
      j["match"] = match;
    }
    printf("%s\n", j.dump(2).c_str());
  } else {
    printf("%s  %s  %s bytes\n", d.str().c_str(), o.file.c_str(), WithCommas(size).c_str());
  }
  if (!match) {
    return absl::DataLossError(
        absl::StrCat(o.file, ": digest ", d.str(), " does not match expected ", expected->str()));
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterDigest(CLI::App& app, Context& ctx) {
  auto opts = std::make_shared<DigestOptions>();
  CLI::App* cmd = app.add_subcommand(
      "digest", "Print a file's OCI digest (sha256:...), optionally checking it");
  cmd->add_option("FILE", opts->file, "File to hash")->required();
  cmd->add_option("--expect", opts->expect, "Expected digest; a mismatch exits 1");
  cmd->add_flag("--json", opts->json, "Print JSON");
  cmd->callback([opts, &ctx] { ctx.status = RunDigest(*opts); });
}

}  // namespace modelfs::cli
