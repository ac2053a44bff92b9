// Strict parsing of containerd 2.1 CRI image-volume snapshot keys (see image_volume_key.h).
#include "snapshotter/content/image_volume_key.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace modelfs::snapshotter {
namespace {

constexpr absl::string_view kCriMarker = "/io.containerd.grpc.v1.cri/image-volumes/";

bool IsLowerHex64(absl::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(c) && !(c >= 'a' && c <= 'f')) return false;
  }
  return true;
}

bool IsDecimal(absl::string_view s) {
  if (s.empty() || s.size() > 20) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(c)) return false;
  }
  return true;
}

// containerd's namespace rule: labels of [A-Za-z0-9] with '-' or '_' inside, joined by '.'.
bool IsNamespace(absl::string_view s) {
  if (s.empty() || s.size() > 76) return false;
  for (absl::string_view label : absl::StrSplit(s, '.')) {
    if (label.empty() || !absl::ascii_isalnum(label.front()) ||
        !absl::ascii_isalnum(label.back())) {
      return false;
    }
    for (char c : label) {
      if (!absl::ascii_isalnum(c) && c != '-' && c != '_') return false;
    }
  }
  return true;
}

}  // namespace

std::optional<ImageVolumeKey> ParseImageVolumeKey(std::string_view whole) {
  const absl::string_view key(whole.data(), whole.size());
  // <namespace>/<n>/<rest>
  const size_t first = key.find('/');
  if (first == absl::string_view::npos) return std::nullopt;
  const size_t second = key.find('/', first + 1);
  if (second == absl::string_view::npos) return std::nullopt;
  const absl::string_view ns = key.substr(0, first);
  const absl::string_view counter = key.substr(first + 1, second - first - 1);
  if (!IsNamespace(ns) || !IsDecimal(counter)) return std::nullopt;
  // <state dir><marker><sandbox>/<hex>, the marker exactly once, the state dir non-empty.
  const absl::string_view rest = key.substr(second + 1);
  const size_t marker = rest.find(kCriMarker);
  if (marker == absl::string_view::npos || marker == 0 ||
      rest.find(kCriMarker, marker + 1) != absl::string_view::npos) {
    return std::nullopt;
  }
  const absl::string_view state = rest.substr(0, marker);
  for (absl::string_view part : absl::StrSplit(state, '/')) {
    if (part == "." || part == "..") return std::nullopt;
  }
  std::vector<absl::string_view> tail =
      absl::StrSplit(rest.substr(marker + kCriMarker.size()), '/');
  if (tail.size() != 2 || !IsLowerHex64(tail[0]) || !IsLowerHex64(tail[1])) return std::nullopt;
  absl::StatusOr<Digest> image = Digest::Parse(absl::StrCat("sha256:", tail[1]));
  if (!image.ok()) return std::nullopt;
  return ImageVolumeKey{std::string(ns), std::string(tail[0]), *image};
}

}  // namespace modelfs::snapshotter
