#include "core/oci/path_safety.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace modelfs {
namespace {

absl::Status Refuse(std::string_view path, std::string_view why) {
  // Bounded: it may be huge. It stays as it is otherwise; whoever prints the message escapes it
  // (EscapeUntrusted), once.
  std::string shown(path.substr(0, 256));
  if (path.size() > 256) shown += "...";
  return absl::PermissionDeniedError(
      absl::StrCat("refused path '", shown, "': ", absl::string_view(why.data(), why.size())));
}

// Checks everything except the component structure.
absl::Status CheckCharacters(std::string_view path) {
  if (path.empty()) return Refuse(path, "empty");
  if (path.size() > kMaxPathBytes) return Refuse(path, "longer than 4096 bytes");
  if (path.find('\0') != std::string_view::npos) return Refuse(path, "contains NUL");
  if (path.find('\\') != std::string_view::npos) return Refuse(path, "contains a backslash");
  // A newline or ESC in a name forges lines of output and logs and drives terminals.
  for (char c : path) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return Refuse(path, "contains a control character");
    }
  }
  if (path.front() == '/') return Refuse(path, "absolute");
  return absl::OkStatus();
}

std::vector<std::string_view> Split(std::string_view path) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) {
      parts.push_back(path.substr(start));
      return parts;
    }
    parts.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
}

}  // namespace

absl::Status CheckRelativePath(std::string_view path) {
  if (absl::Status s = CheckCharacters(path); !s.ok()) return s;
  for (std::string_view c : Split(path)) {
    if (c == "..") return Refuse(path, "has a '..' component");
    if (c.empty()) return Refuse(path, "has an empty component");
    if (c == ".") return Refuse(path, "has a '.' component");
    if (c.size() > kMaxComponentBytes) return Refuse(path, "has a component over 255 bytes");
  }
  return absl::OkStatus();
}

bool IsRootPath(std::string_view path) {
  for (std::string_view c : Split(path)) {
    if (!c.empty() && c != ".") return false;
  }
  return path.empty() || path.front() != '/';
}

absl::StatusOr<std::string> NormalizeRelativePath(std::string_view path) {
  if (absl::Status s = CheckCharacters(path); !s.ok()) return s;
  std::vector<std::string_view> kept;
  for (std::string_view c : Split(path)) {
    if (c.empty() || c == ".") continue;
    if (c == "..") return Refuse(path, "has a '..' component");
    kept.push_back(c);
  }
  if (kept.empty()) return Refuse(path, "names the root directory");
  std::string out;
  for (size_t i = 0; i < kept.size(); ++i) {
    if (i) out.push_back('/');
    out.append(kept[i]);
  }
  if (absl::Status s = CheckRelativePath(out); !s.ok()) return s;
  return out;
}

}  // namespace modelfs
