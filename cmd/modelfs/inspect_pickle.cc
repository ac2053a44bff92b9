// `modelfs inspect` on pickle checkpoints (.bin, .pt, .pth, .pkl, .ckpt): the globals each one
// imports, read without executing anything (core/formats/pickle_scan.h).
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cmd/modelfs/cli.h"
#include "core/formats/pickle_scan.h"
#include "core/io/range_reader.h"
#include "core/status/status_macros.h"

namespace modelfs::cli {
namespace {

namespace fs = std::filesystem;

// A local file that is a pickle checkpoint by name, or by its first bytes when its name says
// nothing else (a zip or a PROTO opcode, and not a .safetensors/.gguf/.json).
bool IsLocalPickle(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  if (IsPickleFileName(path)) return true;
  const std::string ext = fs::path(path).extension().string();
  if (ext == ".safetensors" || ext == ".gguf" || ext == ".json") return false;
  auto reader = OpenFileRangeReader(path);
  if (!reader.ok()) return false;
  auto size = (*reader)->Size();
  if (!size.ok() || *size < 2) return false;
  auto first = (*reader)->ReadAt(0, std::min<uint64_t>(*size, 4));
  return first.ok() && LooksLikePickleCheckpoint(*first);
}

bool IsModelFileName(const std::string& name) {
  return name == "config.json" || absl::EndsWith(name, ".safetensors") ||
         absl::EndsWith(name, ".gguf") || absl::EndsWith(name, ".safetensors.index.json");
}

}  // namespace

absl::StatusOr<PickleInspection> InspectPickles(const std::vector<std::string>& paths,
                                                bool insecure) {
  PickleInspection out;
  std::vector<std::string> pickles;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (IsHttpUrl(p)) {
      const std::string no_query = p.substr(0, p.find_first_of("?#"));
      (IsPickleFileName(no_query) ? pickles : out.other_paths).push_back(p);
    } else if (fs::is_directory(p, ec)) {
      bool has_model = false;
      std::vector<std::string> found;
      for (auto it = fs::recursive_directory_iterator(p, ec); !ec && it != fs::end(it);
           it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (it->is_directory(ec) && (name == ".git" || name == ".cache")) {
          it.disable_recursion_pending();
          continue;
        }
        if (!it->is_regular_file(ec)) continue;
        if (IsPickleFileName(name)) found.push_back(it->path().string());
        has_model |= IsModelFileName(name);
      }
      std::sort(found.begin(), found.end());
      pickles.insert(pickles.end(), found.begin(), found.end());
      if (has_model || found.empty()) out.other_paths.push_back(p);
    } else if (IsLocalPickle(p)) {
      pickles.push_back(p);
    } else {
      out.other_paths.push_back(p);
    }
  }
  HttpReaderOptions http;
  http.verify_tls = !insecure;
  for (const std::string& p : pickles) {
    ASSIGN_OR_RETURN(auto reader, OpenRangeReader(p, http));
    ASSIGN_OR_RETURN(PickleScan scan, ScanPickleFile(*reader));
    out.scans.push_back(std::move(scan));
  }
  return out;
}

absl::Status PickleVerdict(const PickleInspection& inspection) {
  std::vector<std::string> parts;
  for (const PickleScan& s : inspection.scans) {
    if (s.safe()) continue;
    std::vector<std::string> named;
    for (const std::string& f : s.flagged) {
      // os.system pickles as posix.system (nt.system on Windows): say both.
      if (absl::StartsWith(f, "posix.") || absl::StartsWith(f, "nt.")) {
        named.push_back(absl::StrCat(f, " (os.", f.substr(f.find('.') + 1), ")"));
      } else {
        named.push_back(f);
      }
    }
    parts.push_back(absl::StrCat(s.location, ": ", absl::StrJoin(named, ", ")));
  }
  if (parts.empty()) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "pickle imports outside the allow-list (nothing was executed; loading the file would run "
      "them): ",
      absl::StrJoin(parts, "; ")));
}

}  // namespace modelfs::cli
