// `modelfs fetch REPO [FILE...] --revision REV --dest DIR` and `modelfs fetch --lock FILE
// --dest DIR`: a Hugging Face repository at one commit, verified and pinned (core/hub/fetch.h).
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "cmd/modelfs/cli.h"
#include "core/base/clock.h"
#include "core/hub/fetch.h"
#include "core/hub/http_hub_client.h"
#include "core/status/status_macros.h"
#include "core/text/escape.h"
#include "core/text/number_format.h"

namespace modelfs::cli {
namespace {

struct FetchCli {
  std::string repo;
  std::vector<std::string> files;
  std::string revision;
  std::string dest;
  std::string lock;
  std::vector<std::string> include, exclude;
  bool resolve = false;
  bool allow_pickle = false;
  bool allow_remote_code = false;
  bool json = false;
};

// One progress line on stderr, redrawn at most every 100 ms of `clock`, only when stdout is a
// terminal (as pull does).
FetchProgressFn MakeFetchProgress(bool json, Clock* clock = Clock::Real()) {
  if (json || !StdoutIsTty()) return nullptr;
  auto last = std::make_shared<absl::Time>(absl::InfinitePast());
  return [last, clock](const std::string& path, uint64_t done, uint64_t total) {
    const absl::Time now = clock->Now();
    const bool finished = done >= total;
    if (!finished && now - *last < absl::Milliseconds(100)) return;
    *last = now;
    const int pct = total ? static_cast<int>(100.0 * static_cast<double>(done) / total) : 100;
    fprintf(stderr, "\r\033[K%s: %s / %s (%d%%)%s", EscapeUntrusted(path).c_str(),
            HumanBytes(done).c_str(), HumanBytes(total).c_str(), pct, finished ? "\n" : "");
    fflush(stderr);
  };
}

absl::Status RunFetch(const FetchCli& c) {
  FetchOptions o;
  o.repo = c.repo;
  o.revision = c.revision;
  o.files = c.files;
  o.include = c.include;
  o.exclude = c.exclude;
  o.resolve = c.resolve;
  o.allow_pickle = c.allow_pickle;
  o.allow_remote_code = c.allow_remote_code;
  o.dest = c.dest;
  if (!c.lock.empty()) {
    ASSIGN_OR_RETURN(o.lock, ReadLockFile(c.lock));
  } else if (c.repo.empty()) {
    return absl::InvalidArgumentError("fetch needs REPO (or --lock FILE)");
  }
  o.progress = MakeFetchProgress(c.json);
  HubClientOptions ho = HubClientOptionsFromEnv();
  ho.user_agent = std::string("modelfs/") + MODELFS_VERSION;
  ASSIGN_OR_RETURN(auto hub, HttpHubClient::Create(ho));
  absl::StatusOr<FetchResult> fetched = FetchModel(*hub, o);
  if (!fetched.ok()) return fetched.status();
  const FetchResult& r = *fetched;
  if (c.json) {
    printf("%s\n", FetchResultToJson(r).dump(2).c_str());
    return absl::OkStatus();
  }
  if (r.resolved) {
    // What to pin next time; on stdout so scripts can take it.
    printf("resolved %s to commit %s\n", EscapeUntrusted(r.revision).c_str(), r.commit.c_str());
  }
  for (const FetchedFile& f : r.files) {
    printf("verified %s %14s  %s\n", f.sha256.substr(0, 12).c_str(), WithCommas(f.size).c_str(),
           EscapeUntrusted(f.path).c_str());
  }
  for (const std::string& p : r.skipped_pickle) {
    printf("skipped  %s (pickle checkpoint; --allow-pickle fetches it)\n",
           EscapeUntrusted(p).c_str());
  }
  for (const std::string& n : r.notes) printf("note: %s\n", EscapeUntrusted(n).c_str());
  printf("fetched %s@%s (%zu files, %s bytes) into %s\n", EscapeUntrusted(r.repo).c_str(),
         r.commit.c_str(), r.files.size(), WithCommas(r.bytes).c_str(),
         EscapeUntrusted(r.dest).c_str());
  printf("lock %s\n", EscapeUntrusted(r.lock_path).c_str());
  return absl::OkStatus();
}

}  // namespace

void RegisterFetch(CLI::App& app, Context& ctx) {
  auto c = std::make_shared<FetchCli>();
  CLI::App* cmd = app.add_subcommand(
      "fetch",
      "Download a Hugging Face repository at one commit, verify every file against the Hub's "
      "SHA-256 / git blob id, validate safetensors and GGUF headers, and write "
      "DIR/modelfs.lock.json. Uses HF_ENDPOINT and HF_TOKEN");
  cmd->add_option("REPO", c->repo, "Repository id, NAMESPACE/NAME");
  cmd->add_option("FILE", c->files, "Only these files (paths in the repository)");
  cmd->add_option("--revision", c->revision,
                  "Full commit hash (a branch or tag name needs --resolve)");
  cmd->add_option("--dest", c->dest, "Destination directory")->required();
  cmd->add_option("--lock", c->lock,
                  "Fetch exactly what this modelfs.lock.json names, and verify it");
  cmd->add_flag("--resolve", c->resolve,
                "Accept a branch or tag name for --revision and print the commit it resolved to");
  cmd->add_option("--include", c->include,
                  "Glob of paths to fetch instead of the defaults (repeatable)");
  cmd->add_option("--exclude", c->exclude, "Glob of paths not to fetch (repeatable)");
  cmd->add_flag("--allow-pickle", c->allow_pickle,
                "Also fetch pickle checkpoints (*.bin *.pt *.pth *.pkl *.pickle *.ckpt), which "
                "can run code when loaded");
  cmd->add_flag("--allow-remote-code", c->allow_remote_code,
                "Fetch a repository whose config.json has auto_map (and its *.py files)");
  cmd->add_flag("--json", c->json, "Print JSON");
  cmd->footer(
      "Defaults: *.json, tokenizer files, *.safetensors, *.gguf, *.txt, *.md, LICENSE*, never a "
      "pickle checkpoint.\nExit codes: 0 fetched and verified; 1 verification failure, gated or "
      "private repository without HF_TOKEN, refused path, pickle or remote code refused; 2 bad "
      "input (missing file or revision, a branch name without --resolve, malformed header)");
  cmd->callback([c, &ctx] { ctx.status = RunFetch(*c); });
}

}  // namespace modelfs::cli
