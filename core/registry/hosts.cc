#include "core/registry/hosts.h"

#include <toml++/toml.h>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/registry/reference.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

namespace fs = std::filesystem;

std::string Resolve(const std::string& dir, const std::string& p) {
  if (p.empty() || fs::path(p).is_absolute() || dir.empty()) return p;
  return (fs::path(dir) / p).string();
}

absl::Status Bad(const std::string& source, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

// path.Clean for a URL path: "/a//b/../v2/" -> "/a/v2"; "" stays "".
std::string CleanPath(const std::string& p) {
  if (p.empty()) return p;
  std::vector<std::string> parts;
  size_t i = 0;
  while (i <= p.size()) {
    size_t j = p.find('/', i);
    if (j == std::string::npos) j = p.size();
    std::string part = p.substr(i, j - i);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    i = j + 1;
  }
  std::string out;
  for (const auto& part : parts) absl::StrAppend(&out, "/", part);
  return out.empty() ? "/" : out;
}

// Splits "http://host:port[/path]" into scheme, host and API root path as containerd's
// parseHostConfig does: no scheme means https (another scheme is refused); a path gains "/v2"
// unless it already ends in /v2 or override_path is set; no path means "/v2" (or "" with
// override_path).
absl::Status ParseUrl(std::string url, bool override_path, const std::string& source,
                      HostEndpoint* out) {
  if (url.find("://") == std::string::npos) url = "https://" + url;
  size_t sep = url.find("://");
  std::string scheme = absl::AsciiStrToLower(url.substr(0, sep));
  if (scheme != "http" && scheme != "https") {
    return Bad(source, absl::StrCat("URL \"", url, "\" must be http or https"));
  }
  std::string rest = url.substr(sep + 3);
  std::string path;
  size_t slash = rest.find_first_of("/?#");
  if (slash != std::string::npos) {
    if (rest[slash] != '/') {
      return Bad(source, absl::StrCat("URL \"", url, "\": a query or fragment is not supported"));
    }
    path = rest.substr(slash);
    rest = rest.substr(0, slash);
  }
  if (rest.empty()) return Bad(source, absl::StrCat("URL \"", url, "\" has no host"));
  if (!path.empty()) {
    path = CleanPath(path);
    if (path == "/") path.clear();
  }
  if (!override_path && !absl::EndsWith(path, "/v2")) path += "/v2";
  out->scheme = scheme;
  out->host = rest;
  out->path = path;
  return absl::OkStatus();
}

absl::Status ReadCapabilities(const toml::table& t, const std::string& source, HostEndpoint* ep) {
  const toml::node* caps = t.get("capabilities");
  if (caps == nullptr) return absl::OkStatus();
  const toml::array* a = caps->as_array();
  if (a == nullptr) return Bad(source, "capabilities must be a list of strings");
  if (a->empty()) return absl::OkStatus();  // containerd: an empty list means the default
  ep->pull = ep->resolve = ep->push = false;
  for (const toml::node& c : *a) {
    auto s = c.value<std::string>();
    if (!s) return Bad(source, "capabilities must be a list of strings");
    std::string lower = absl::AsciiStrToLower(*s);
    if (lower == "pull") {
      ep->pull = true;
    } else if (lower == "resolve") {
      ep->resolve = true;
    } else if (lower == "push") {
      ep->push = true;
    } else {
      return Bad(source, absl::StrCat("unknown capability \"", *s, "\""));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadHeaders(const toml::table& t, const std::string& source, HostEndpoint* ep) {
  const toml::node* n = t.get("header");
  if (n == nullptr) return absl::OkStatus();
  const toml::table* h = n->as_table();
  if (h == nullptr) return Bad(source, "header must be a table of name = value");
  for (const auto& [key, value] : *h) {
    std::string name(key.str());
    // A header line is built from these; CR or LF would let a file smuggle in others.
    auto clean = [](const std::string& s) { return s.find_first_of("\r\n") == std::string::npos; };
    if (name.empty() || !clean(name) || name.find(':') != std::string::npos) {
      return Bad(source, absl::StrCat("header name \"", name, "\" is not valid"));
    }
    std::vector<std::string> values;
    if (auto s = value.value<std::string>()) {
      values.push_back(*s);
    } else if (const toml::array* a = value.as_array()) {
      for (const toml::node& e : *a) {
        auto s2 = e.value<std::string>();
        if (!s2) return Bad(source, absl::StrCat("header ", name, " must be a string or a list"));
        values.push_back(*s2);
      }
    } else {
      return Bad(source, absl::StrCat("header ", name, " must be a string or a list"));
    }
    for (const std::string& v : values) {
      if (!clean(v)) return Bad(source, absl::StrCat("header ", name, " has a line break"));
      ep->headers.push_back(absl::StrCat(name, ": ", v));
    }
  }
  return absl::OkStatus();
}

// Reads the keys containerd allows both at the top level and inside [host."..."].
absl::Status ReadTlsKeys(const toml::table& t, const std::string& dir, const std::string& source,
                         HostEndpoint* ep) {
  if (const toml::node* n = t.get("skip_verify")) {
    auto v = n->value<bool>();
    if (!v) return Bad(source, "skip_verify must be a boolean");
    ep->skip_verify = *v;
  }
  if (const toml::node* n = t.get("ca")) {
    ep->ca_files.clear();
    if (auto s = n->value<std::string>()) {
      ep->ca_files.push_back(Resolve(dir, *s));
    } else if (const toml::array* a = n->as_array()) {
      for (const toml::node& e : *a) {
        auto s2 = e.value<std::string>();
        if (!s2) return Bad(source, "ca must be a string or a list of strings");
        ep->ca_files.push_back(Resolve(dir, *s2));
      }
    } else {
      return Bad(source, "ca must be a string or a list of strings");
    }
  }
  if (const toml::node* n = t.get("client")) {
    if (auto s = n->value<std::string>()) {
      ep->client_cert = ep->client_key = Resolve(dir, *s);
    } else if (const toml::array* a = n->as_array()) {
      // Either ["cert", "key"] or [["cert", "key"]]; the first pair wins.
      const toml::array* pair = a;
      if (!a->empty() && a->front().is_array()) pair = a->front().as_array();
      if (pair->empty() || pair->size() > 2) return Bad(source, "client must be [cert, key]");
      auto cert = (*pair)[0].value<std::string>();
      auto key = pair->size() == 2 ? (*pair)[1].value<std::string>() : cert;
      if (!cert || !key) return Bad(source, "client must be [cert, key]");
      ep->client_cert = Resolve(dir, *cert);
      ep->client_key = Resolve(dir, *key);
    } else {
      return Bad(source, "client must be a string or [cert, key]");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> ReadOverridePath(const toml::table& t, const std::string& source) {
  const toml::node* n = t.get("override_path");
  if (n == nullptr) return false;
  auto v = n->value<bool>();
  if (!v) return Bad(source, "override_path must be a boolean");
  return *v;
}

// A certs.d directory without hosts.toml, docker style: *.crt are CAs, *.cert a client
// certificate with the *.key of the same name (or the key inside the .cert).
HostEndpoint FromCertFiles(std::string_view registry, const fs::path& dir,
                           std::string_view default_scheme) {
  HostEndpoint ep = DefaultHostEndpoint(registry);
  ep.scheme = std::string(default_scheme);
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec)) names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) {
    if (absl::EndsWith(n, ".crt")) ep.ca_files.push_back((dir / n).string());
    if (absl::EndsWith(n, ".cert") && ep.client_cert.empty()) {
      ep.client_cert = (dir / n).string();
      fs::path key = dir / (n.substr(0, n.size() - 5) + ".key");
      ep.client_key = fs::exists(key, ec) ? key.string() : ep.client_cert;
    }
  }
  return ep;
}

}  // namespace

bool HostEndpoint::Has(HostCapability c) const {
  switch (c) {
    case HostCapability::kPull:
      return pull;
    case HostCapability::kResolve:
      return resolve;
    case HostCapability::kPush:
      return push;
  }
  return false;
}

HostEndpoint DefaultHostEndpoint(std::string_view registry) {
  HostEndpoint ep;
  ep.host = registry == kDockerHubName ? std::string(kDockerHubApiHost) : std::string(registry);
  return ep;
}

bool IsProxyFor(const HostEndpoint& endpoint, std::string_view registry) {
  if (endpoint.host == registry) return false;
  return !(registry == kDockerHubName && endpoint.host == kDockerHubApiHost);
}

std::vector<std::string> HostDirectoryNames(std::string_view registry) {
  std::vector<std::string> out;
  std::string host(registry);
  size_t colon = host.rfind(':');
  if (colon != std::string::npos && colon > 0) {
    out.push_back(absl::StrCat(host.substr(0, colon), "_", host.substr(colon + 1), "_"));
  }
  out.push_back(host);
  out.push_back("_default");
  return out;
}

absl::StatusOr<std::vector<HostEndpoint>> ParseHostsToml(std::string_view registry,
                                                         std::string_view text,
                                                         const std::string& dir,
                                                         const std::string& source,
                                                         std::string_view default_scheme) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return Bad(source, absl::StrCat("TOML error at line ", e.source().begin.line, ": ",
                                    std::string(e.description())));
  }

  HostEndpoint server = DefaultHostEndpoint(registry);
  server.scheme = std::string(default_scheme);
  ASSIGN_OR_RETURN(bool server_override, ReadOverridePath(root, source));
  if (const toml::node* n = root.get("server")) {
    auto url = n->value<std::string>();
    if (!url) return Bad(source, "server must be a string");
    if (!url->empty()) {
      RETURN_IF_ERROR(ParseUrl(*url, server_override, source, &server));
      // containerd applies top-level capabilities only to a server named here; the implicit
      // default server always gets pull, resolve and push.
      RETURN_IF_ERROR(ReadCapabilities(root, source, &server));
    }
  }
  RETURN_IF_ERROR(ReadTlsKeys(root, dir, source, &server));
  RETURN_IF_ERROR(ReadHeaders(root, source, &server));

  std::vector<std::pair<int, HostEndpoint>> mirrors;
  if (const toml::node* n = root.get("host")) {
    const toml::table* hosts = n->as_table();
    if (hosts == nullptr) return Bad(source, "host must be a table of [host.\"URL\"] sections");
    for (const auto& [key, value] : *hosts) {
      std::string url(key.str());
      const toml::table* t = value.as_table();
      if (t == nullptr) return Bad(source, absl::StrCat("host.\"", url, "\" must be a table"));
      HostEndpoint ep;
      ep.mirror = true;
      ASSIGN_OR_RETURN(bool override_path, ReadOverridePath(*t, source));
      RETURN_IF_ERROR(ParseUrl(url, override_path, source, &ep));
      RETURN_IF_ERROR(ReadCapabilities(*t, source, &ep));
      RETURN_IF_ERROR(ReadTlsKeys(*t, dir, source, &ep));
      RETURN_IF_ERROR(ReadHeaders(*t, source, &ep));
      // toml++ keeps keys sorted; containerd tries hosts in the order the file lists them.
      mirrors.emplace_back(static_cast<int>(t->source().begin.line), std::move(ep));
    }
  }
  std::stable_sort(mirrors.begin(), mirrors.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<HostEndpoint> out;
  for (auto& [line, ep] : mirrors) out.push_back(std::move(ep));
  out.push_back(std::move(server));
  return out;
}

absl::StatusOr<std::vector<HostEndpoint>> ResolveHosts(std::string_view registry,
                                                       const HostsOptions& options) {
  const bool listed = std::find(options.plain_http_hosts.begin(), options.plain_http_hosts.end(),
                                std::string(registry)) != options.plain_http_hosts.end();
  const std::string_view default_scheme = options.plain_http || listed ? "http" : "https";
  if (!options.certs_dir.empty()) {
    for (const std::string& name : HostDirectoryNames(registry)) {
      const fs::path dir = fs::path(options.certs_dir) / name;
      std::error_code ec;
      if (!fs::is_directory(dir, ec)) continue;
      // containerd uses the first directory that exists, with or without hosts.toml.
      const fs::path file = dir / "hosts.toml";
      if (!fs::exists(file, ec))
        return std::vector<HostEndpoint>{FromCertFiles(registry, dir, default_scheme)};
      std::ifstream in(file, std::ios::binary);
      if (!in) return absl::InternalError(absl::StrCat("cannot read ", file.string()));
      std::stringstream ss;
      ss << in.rdbuf();
      return ParseHostsToml(registry, ss.str(), dir.string(), file.string(), default_scheme);
    }
  }
  HostEndpoint ep = DefaultHostEndpoint(registry);
  ep.scheme = std::string(default_scheme);
  return std::vector<HostEndpoint>{std::move(ep)};
}

absl::StatusOr<HostEndpoint> ResolveHost(std::string_view registry, HostCapability capability,
                                         const HostsOptions& options) {
  ASSIGN_OR_RETURN(std::vector<HostEndpoint> all, ResolveHosts(registry, options));
  for (HostEndpoint& ep : all) {
    if (ep.Has(capability)) return std::move(ep);
  }
  const char* what = capability == HostCapability::kPush      ? "push"
                     : capability == HostCapability::kResolve ? "resolve"
                                                              : "pull";
  return absl::FailedPreconditionError(
      absl::StrCat("no configured host for registry ", std::string(registry), " allows ", what));
}

}  // namespace modelfs
