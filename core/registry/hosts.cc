#include "core/registry/hosts.h"

#include <toml++/toml.h>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

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

// Splits "http://host:port[/path]" into scheme and host. A path is not supported (we always
// append /v2), so refuse it rather than silently talking to the wrong place.
absl::Status ParseUrl(const std::string& url, const std::string& source, HostEndpoint* out) {
  size_t sep = url.find("://");
  if (sep == std::string::npos) return Bad(source, absl::StrCat("URL \"", url, "\" has no scheme"));
  std::string scheme = url.substr(0, sep);
  if (scheme != "http" && scheme != "https") {
    return Bad(source, absl::StrCat("URL \"", url, "\" must be http or https"));
  }
  std::string rest = url.substr(sep + 3);
  size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    std::string path = rest.substr(slash);
    if (path != "/" && path != "/v2" && path != "/v2/") {
      return Bad(source, absl::StrCat("URL \"", url, "\": a path other than /v2 is not supported"));
    }
    rest = rest.substr(0, slash);
  }
  if (rest.empty()) return Bad(source, absl::StrCat("URL \"", url, "\" has no host"));
  out->scheme = scheme;
  out->host = rest;
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

absl::StatusOr<std::vector<HostEndpoint>> ParseHostsToml(std::string_view registry,
                                                         std::string_view text,
                                                         const std::string& dir,
                                                         const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return Bad(source, absl::StrCat("TOML error at line ", e.source().begin.line, ": ",
                                    std::string(e.description())));
  }

  HostEndpoint server = DefaultHostEndpoint(registry);
  if (const toml::node* n = root.get("server")) {
    auto url = n->value<std::string>();
    if (!url) return Bad(source, "server must be a string");
    RETURN_IF_ERROR(ParseUrl(*url, source, &server));
  }
  RETURN_IF_ERROR(ReadTlsKeys(root, dir, source, &server));

  std::vector<std::pair<int, HostEndpoint>> mirrors;
  if (const toml::node* n = root.get("host")) {
    const toml::table* hosts = n->as_table();
    if (hosts == nullptr) return Bad(source, "host must be a table of [host.\"URL\"] sections");
    for (const auto& [key, value] : *hosts) {
      std::string url(key.str());
      const toml::table* t = value.as_table();
      if (t == nullptr) return Bad(source, absl::StrCat("host.\"", url, "\" must be a table"));
      HostEndpoint ep;
      RETURN_IF_ERROR(ParseUrl(url, source, &ep));
      if (const toml::node* caps = t->get("capabilities")) {
        const toml::array* a = caps->as_array();
        if (a == nullptr) return Bad(source, "capabilities must be a list of strings");
        ep.pull = ep.resolve = ep.push = false;
        for (const toml::node& c : *a) {
          auto s = c.value<std::string>();
          if (!s) return Bad(source, "capabilities must be a list of strings");
          if (*s == "pull") {
            ep.pull = true;
          } else if (*s == "resolve") {
            ep.resolve = true;
          } else if (*s == "push") {
            ep.push = true;
          } else {
            return Bad(source, absl::StrCat("unknown capability \"", *s, "\""));
          }
        }
      }
      RETURN_IF_ERROR(ReadTlsKeys(*t, dir, source, &ep));
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
  std::vector<HostEndpoint> out;
  const bool listed = std::find(options.plain_http_hosts.begin(), options.plain_http_hosts.end(),
                                std::string(registry)) != options.plain_http_hosts.end();
  if (options.plain_http || listed) {
    HostEndpoint ep = DefaultHostEndpoint(registry);
    ep.scheme = "http";
    out.push_back(std::move(ep));
    return out;
  }
  if (!options.certs_dir.empty()) {
    std::string host_dir = options.certs_dir + "/" + std::string(registry);
    for (const std::string& dir : {host_dir, options.certs_dir + "/_default"}) {
      std::string file = dir + "/hosts.toml";
      std::error_code ec;
      if (!fs::exists(file, ec)) continue;
      std::ifstream in(file, std::ios::binary);
      if (!in) return absl::InternalError(absl::StrCat("cannot read ", file));
      std::stringstream ss;
      ss << in.rdbuf();
      return ParseHostsToml(registry, ss.str(), dir, file);
    }
  }
  out.push_back(DefaultHostEndpoint(registry));
  return out;
}

absl::StatusOr<HostEndpoint> ResolveHost(std::string_view registry, HostCapability capability,
                                         const HostsOptions& options) {
  ASSIGN_OR_RETURN(std::vector<HostEndpoint> all, ResolveHosts(registry, options));
  for (HostEndpoint& ep : all) {
    if (ep.Has(capability)) return std::move(ep);
  }
  return absl::FailedPreconditionError(
      absl::StrCat("no configured host for registry ", std::string(registry), " allows ",
                   capability == HostCapability::kPush ? "push" : "pull"));
}

}  // namespace modelfs
