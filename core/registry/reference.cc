#include "core/registry/reference.h"

#include <cctype>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

constexpr size_t kMaxNameLength = 255;
constexpr size_t kMaxTagLength = 128;

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// One path component: [a-z0-9]+ ((\.|_|__|-+) [a-z0-9]+)*
bool ValidComponent(std::string_view c) {
  if (c.empty() || !IsLowerAlnum(c.front()) || !IsLowerAlnum(c.back())) return false;
  size_t i = 0;
  while (i < c.size()) {
    if (IsLowerAlnum(c[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < c.size() && !IsLowerAlnum(c[j])) ++j;
    std::string_view sep = c.substr(i, j - i);
    bool dashes = sep.find_first_not_of('-') == std::string_view::npos;
    if (!(sep == "." || sep == "_" || sep == "__" || dashes)) return false;
    i = j;
  }
  return true;
}

bool ValidTag(std::string_view t) {
  if (t.empty() || t.size() > kMaxTagLength) return false;
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  if (!word(t.front())) return false;
  for (char c : t) {
    if (!word(c) && c != '.' && c != '-') return false;
  }
  return true;
}

// host[:port] where host is a DNS name, an IPv4 address or a bracketed IPv6 address.
bool ValidRegistry(std::string_view r) {
  if (r.empty()) return false;
  std::string_view host = r;
  std::string_view port;
  if (r.front() == '[') {
    size_t close = r.find(']');
    if (close == std::string_view::npos) return false;
    host = r.substr(1, close - 1);
    std::string_view rest = r.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return false;
      port = rest.substr(1);
      if (port.empty()) return false;
    }
    for (char c : host) {
      if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') return false;
    }
  } else {
    size_t colon = r.find(':');
    if (colon != std::string_view::npos) {
      host = r.substr(0, colon);
      port = r.substr(colon + 1);
      if (port.empty()) return false;
    }
    if (host.empty()) return false;
    for (absl::string_view l : absl::StrSplit(absl::string_view(host.data(), host.size()), '.')) {
      std::string_view label(l.data(), l.size());
      if (label.empty() || label.front() == '-' || label.back() == '-') return false;
      for (char c : label) {
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
      }
    }
  }
  if (port.size() > 5) return false;
  for (char c : port) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

absl::Status Invalid(std::string_view ref, const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid image reference \"", std::string(ref), "\": ", why));
}

}  // namespace

absl::Status ValidateRepository(std::string_view repository) {
  if (repository.empty()) return absl::InvalidArgumentError("empty repository name");
  if (repository.size() > kMaxNameLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("repository name longer than ", kMaxNameLength, " characters"));
  }
  for (char c : repository) {
    if (c >= 'A' && c <= 'Z') {
      return absl::InvalidArgumentError(
          absl::StrCat("repository name \"", std::string(repository), "\" must be lowercase"));
    }
  }
  for (absl::string_view part :
       absl::StrSplit(absl::string_view(repository.data(), repository.size()), '/')) {
    std::string_view c(part.data(), part.size());
    if (!ValidComponent(c)) {
      return absl::InvalidArgumentError(absl::StrCat("repository name \"", std::string(repository),
                                                     "\" has an invalid component \"",
                                                     std::string(c), "\""));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ImageReference> ImageReference::Parse(std::string_view ref) {
  if (ref.empty()) return Invalid(ref, "empty");
  ImageReference out;
  std::string_view rest = ref;

  if (size_t at = rest.rfind('@'); at != std::string_view::npos) {
    auto digest = Digest::Parse(rest.substr(at + 1));
    if (!digest.ok()) return Invalid(ref, std::string(digest.status().message()));
    out.digest_ = *std::move(digest);
    rest = rest.substr(0, at);
  }

  size_t last_slash = rest.rfind('/');
  size_t colon = rest.rfind(':');
  if (colon != std::string_view::npos &&
      (last_slash == std::string_view::npos || colon > last_slash)) {
    std::string_view tag = rest.substr(colon + 1);
    if (!ValidTag(tag)) {
      return Invalid(ref, absl::StrCat("invalid tag \"", std::string(tag), "\""));
    }
    out.tag_ = std::string(tag);
    rest = rest.substr(0, colon);
  }

  std::string_view name = rest;
  size_t slash = name.find('/');
  if (slash != std::string_view::npos) {
    std::string_view first = name.substr(0, slash);
    if (first.find_first_of(".:") != std::string_view::npos || first == "localhost" ||
        (!first.empty() && first.front() == '[')) {
      if (!ValidRegistry(first)) {
        return Invalid(ref, absl::StrCat("invalid registry \"", std::string(first), "\""));
      }
      out.registry_ = std::string(first);
      name = name.substr(slash + 1);
    }
  }
  if (out.registry_.empty()) out.registry_ = kDockerHubName;
  if (out.registry_ == "index.docker.io" || out.registry_ == kDockerHubApiHost) {
    out.registry_ = kDockerHubName;
  }
  if (name.empty()) return Invalid(ref, "missing repository name");
  out.repository_ = std::string(name);
  if (out.registry_ == kDockerHubName && out.repository_.find('/') == std::string::npos) {
    out.repository_ = absl::StrCat("library/", out.repository_);
  }
  if (absl::Status s = ValidateRepository(out.repository_); !s.ok()) {
    return Invalid(ref, std::string(s.message()));
  }
  if (out.tag_.empty() && !out.digest_.has_value()) out.tag_ = "latest";
  return out;
}

std::string ImageReference::api_host() const {
  return registry_ == kDockerHubName ? std::string(kDockerHubApiHost) : registry_;
}

std::string ImageReference::ManifestReference() const {
  return digest_.has_value() ? digest_->str() : tag_;
}

std::string ImageReference::Name() const { return absl::StrCat(registry_, "/", repository_); }

std::string ImageReference::String() const {
  std::string s = Name();
  if (!tag_.empty()) absl::StrAppend(&s, ":", tag_);
  if (digest_.has_value()) absl::StrAppend(&s, "@", digest_->str());
  return s;
}

}  // namespace modelfs
