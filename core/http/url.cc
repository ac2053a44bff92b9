#include "core/http/url.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace modelfs {

std::string UrlOrigin(std::string_view url) {
  const size_t sep = url.find("://");
  if (sep == std::string_view::npos) return "";
  const size_t end = url.find_first_of("/?#", sep + 3);
  return absl::AsciiStrToLower(absl::string_view(url.data(), url.size()).substr(0, end));
}

std::string ResolveLocation(const std::string& base_url, const std::string& location) {
  if (location.find("://") != std::string::npos) return location;
  const std::string origin = UrlOrigin(base_url);
  if (absl::StartsWith(location, "//")) {
    return absl::StrCat(base_url.substr(0, base_url.find(':')), ":", location);
  }
  if (absl::StartsWith(location, "/")) {
    // UrlOrigin() lowercases; keep the original spelling of the base instead.
    return absl::StrCat(base_url.substr(0, origin.size()), location);
  }
  std::string dir = base_url.substr(0, base_url.find_first_of("?#"));
  dir = dir.substr(0, dir.rfind('/') + 1);
  return dir + location;
}

bool IsRedirectStatus(long status) {
  return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
}

}  // namespace modelfs
