// model_hosts entries: their forms, checked when the config is read, and matching.
#include "snapshotter/policy/model_hosts.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace modelfs::snapshotter {

absl::Status CheckModelHostEntry(absl::string_view entry) {
  auto invalid = [entry](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model_hosts \"", entry, "\": ", why,
        "; want a registry as written in image references, host[:port], optionally with a "
        "repository (host[:port]/team/model) or a repository prefix (host[:port]/team/*)"));
  };
  if (entry.empty()) return invalid("empty");
  if (entry.find_first_of(" \t@") != absl::string_view::npos) return invalid("spaces or '@'");
  if (absl::StrContains(entry, "://")) return invalid("a URL, not a registry");
  const size_t slash = entry.find('/');
  if (slash == 0 || entry.front() == ':') return invalid("no host");
  if (slash == absl::string_view::npos) {
    if (absl::StrContains(entry, "*")) return invalid("'*' only as the last path element");
    return absl::OkStatus();
  }
  std::vector<absl::string_view> parts = absl::StrSplit(entry.substr(slash + 1), '/');
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].empty()) return invalid("an empty path element");
    const bool last = i + 1 == parts.size();
    if (absl::StrContains(parts[i], "*") && !(last && parts[i] == "*" && i > 0)) {
      return invalid("'*' only as the last path element, after a repository prefix");
    }
  }
  return absl::OkStatus();
}

bool ModelHostAllows(absl::string_view entry, absl::string_view registry,
                     absl::string_view repository) {
  const size_t slash = entry.find('/');
  if (slash == absl::string_view::npos) return entry == registry;
  if (entry.substr(0, slash) != registry) return false;
  absl::string_view path = entry.substr(slash + 1);
  if (absl::ConsumeSuffix(&path, "/*")) {
    // "team/*" allows "team/m" and "team/sub/m", not "team" itself nor "teammate/m".
    return repository.size() > path.size() + 1 && absl::StartsWith(repository, path) &&
           repository[path.size()] == '/';
  }
  return repository == path;
}

absl::Status CheckModelHost(const std::vector<std::string>& model_hosts, absl::string_view volume,
                            const RepositoryName& v, absl::string_view model,
                            const RepositoryName& m) {
  if (m.registry == v.registry && m.repository == v.repository) return absl::OkStatus();
  for (const std::string& entry : model_hosts) {
    if (ModelHostAllows(entry, m.registry, m.repository)) return absl::OkStatus();
  }
  // The narrowest entry that allows it: that one repository.
  return absl::PermissionDeniedError(absl::StrCat(
      "volume image ", volume, " in repository ", v.registry, "/", v.repository,
      " names its model ", model, " in repository ", m.registry, "/", m.repository,
      ", where this node does not follow volume images (model_hosts allows nothing beyond a "
      "volume image's own repository there); to allow it, add it to model_hosts in "
      "snapshotter.toml: model_hosts = [\"",
      m.registry, "/", m.repository, "\"]"));
}

}  // namespace modelfs::snapshotter
