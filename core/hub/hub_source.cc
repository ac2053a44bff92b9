#include "core/hub/hub_source.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace modelfs {
namespace {

absl::Status CheckRepoPart(std::string_view part, std::string_view repo) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "repository '", absl::string_view(repo.data(), repo.size()),
        "': ", absl::string_view(why.data(), why.size()), " (want NAME or NAMESPACE/NAME)"));
  };
  if (part.empty()) return bad("empty name");
  if (part.size() > 96) return bad("a name is longer than 96 characters");
  if (part[0] == '.' || part[0] == '-') return bad("a name starts with '.' or '-'");
  if (part.find("..") != std::string_view::npos) return bad("a name holds '..'");
  for (char c : part) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return bad("a name holds a character other than A-Z a-z 0-9 . _ -");
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool IsFullCommitHash(std::string_view revision) {
  if (revision.size() != 40) return false;
  for (char c : revision) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

absl::Status CheckRepoId(std::string_view repo) {
  const size_t slash = repo.find('/');
  if (slash == std::string_view::npos) return CheckRepoPart(repo, repo);
  if (repo.find('/', slash + 1) != std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("repository '", absl::string_view(repo.data(), repo.size()),
                     "': more than one '/' (want NAME or NAMESPACE/NAME)"));
  }
  if (absl::Status st = CheckRepoPart(repo.substr(0, slash), repo); !st.ok()) return st;
  return CheckRepoPart(repo.substr(slash + 1), repo);
}

}  // namespace modelfs
