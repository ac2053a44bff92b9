// kubelet credential provider plugins: the config, the exec protocol, matchImages and the cache.
#include "core/registry/kubelet_credential_provider.h"

#include <fnmatch.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/registry/credential_process.h"
#include "nlohmann/json.hpp"

namespace modelfs {
namespace {

using json = nlohmann::json;

constexpr char kConfigApiVersion[] = "kubelet.config.k8s.io/v1";
constexpr char kConfigKind[] = "CredentialProviderConfig";

bool KnownProviderApiVersion(const std::string& v) {
  return v == "credentialprovider.kubelet.k8s.io/v1" ||
         v == "credentialprovider.kubelet.k8s.io/v1beta1";
}

struct SplitImage {
  std::string host;
  std::string port;
  std::string path;
};

// The kubelet parses both sides as schemeless URLs: host[:port][/path].
SplitImage Split(std::string s) {
  if (size_t sep = s.find("://"); sep != std::string::npos) s = s.substr(sep + 3);
  SplitImage out;
  size_t slash = s.find('/');
  std::string authority = s.substr(0, slash);
  if (slash != std::string::npos) out.path = s.substr(slash);
  size_t colon = authority.rfind(':');
  if (colon != std::string::npos) {
    out.port = authority.substr(colon + 1);
    authority = authority.substr(0, colon);
  }
  out.host = authority;
  return out;
}

absl::StatusOr<std::string> StringField(const json& obj, const char* field, const std::string& at,
                                        bool required) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) {
    if (required) {
      return absl::InvalidArgumentError(absl::StrCat(at, ": \"", field, "\" is required"));
    }
    return std::string();
  }
  if (!it->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(at, ": \"", field, "\" must be a string"));
  }
  return it->get<std::string>();
}

}  // namespace

absl::StatusOr<absl::Duration> ParseGoDuration(const std::string& s) {
  absl::Duration d;
  // absl's syntax is Go's (sequences of number+unit; "0" alone), but Go has no "inf".
  if (s.empty() || absl::StrContains(s, "inf") || !absl::ParseDuration(s, &d) ||
      d < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", s, "\" is not a duration (e.g. 12h, 90s)"));
  }
  return d;
}

bool KubeletImageMatches(const std::string& pattern, const std::string& image) {
  SplitImage g = Split(pattern), t = Split(image);
  if (g.port != t.port) return false;
  std::vector<std::string> gp = absl::StrSplit(g.host, '.');
  std::vector<std::string> tp = absl::StrSplit(t.host, '.');
  if (gp.size() != tp.size()) return false;
  for (size_t i = 0; i < gp.size(); ++i) {
    // Go's filepath.Match on one dot-separated part: '*' and '?' never cross a '/', which a
    // host part does not hold.
    if (fnmatch(gp[i].c_str(), tp[i].c_str(), FNM_PATHNAME) != 0) return false;
  }
  return absl::StartsWith(t.path, g.path);
}

absl::StatusOr<std::vector<KubeletCredentialProvider>> ParseCredentialProviderConfig(
    const std::string& text, const std::string& source) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": not a JSON object (modelfs reads the CredentialProviderConfig as JSON)"));
  }
  absl::StatusOr<std::string> api = StringField(doc, "apiVersion", source, true);
  if (!api.ok()) return api.status();
  if (*api != kConfigApiVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": apiVersion \"", *api, "\" is not ", kConfigApiVersion));
  }
  absl::StatusOr<std::string> kind = StringField(doc, "kind", source, true);
  if (!kind.ok()) return kind.status();
  if (*kind != kConfigKind) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": kind \"", *kind, "\" is not ", kConfigKind));
  }
  auto providers = doc.find("providers");
  if (providers == doc.end() || !providers->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": \"providers\" must be a list"));
  }
  std::vector<KubeletCredentialProvider> out;
  for (size_t i = 0; i < providers->size(); ++i) {
    const json& p = (*providers)[i];
    std::string at = absl::StrCat(source, ": providers[", i, "]");
    if (!p.is_object()) return absl::InvalidArgumentError(at + " must be an object");
    KubeletCredentialProvider kp;
    absl::StatusOr<std::string> name = StringField(p, "name", at, true);
    if (!name.ok()) return name.status();
    kp.name = *name;
    at = absl::StrCat(source, ": provider \"", kp.name, "\"");
    if (kp.name.empty() || absl::StrContains(kp.name, "/") || kp.name == "." || kp.name == "..") {
      return absl::InvalidArgumentError(at + ": the name must be a file name in the bin dir");
    }
    absl::StatusOr<std::string> pv = StringField(p, "apiVersion", at, true);
    if (!pv.ok()) return pv.status();
    if (!KnownProviderApiVersion(*pv)) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, ": apiVersion \"", *pv, "\" is not credentialprovider.kubelet.k8s.io/v1"));
    }
    kp.api_version = *pv;
    auto mi = p.find("matchImages");
    if (mi == p.end() || !mi->is_array() || mi->empty()) {
      return absl::InvalidArgumentError(at + ": \"matchImages\" must be a non-empty list");
    }
    for (const json& m : *mi) {
      if (!m.is_string() || m.get<std::string>().empty()) {
        return absl::InvalidArgumentError(at + ": \"matchImages\" entries must be strings");
      }
      kp.match_images.push_back(m.get<std::string>());
    }
    absl::StatusOr<std::string> dcd = StringField(p, "defaultCacheDuration", at, true);
    if (!dcd.ok()) return dcd.status();
    absl::StatusOr<absl::Duration> d = ParseGoDuration(*dcd);
    if (!d.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, ": defaultCacheDuration: ", d.status().message()));
    }
    kp.default_cache_duration = *d;
    if (auto a = p.find("args"); a != p.end() && !a->is_null()) {
      if (!a->is_array()) return absl::InvalidArgumentError(at + ": \"args\" must be a list");
      for (const json& v : *a) {
        if (!v.is_string()) return absl::InvalidArgumentError(at + ": \"args\" must be strings");
        kp.args.push_back(v.get<std::string>());
      }
    }
    if (auto e = p.find("env"); e != p.end() && !e->is_null()) {
      if (!e->is_array()) return absl::InvalidArgumentError(at + ": \"env\" must be a list");
      for (const json& v : *e) {
        if (!v.is_object()) {
          return absl::InvalidArgumentError(at + ": \"env\" entries must be {name, value}");
        }
        absl::StatusOr<std::string> n = StringField(v, "name", at + ": env", true);
        if (!n.ok()) return n.status();
        absl::StatusOr<std::string> val = StringField(v, "value", at + ": env", false);
        if (!val.ok()) return val.status();
        kp.env.emplace_back(*n, *val);
      }
    }
    out.push_back(std::move(kp));
  }
  return out;
}

absl::StatusOr<KubeletCredentialResponse> ParseCredentialProviderResponse(
    const std::string& text, const std::string& api_version, const std::string& label) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": the answer is not a JSON object"));
  }
  absl::StatusOr<std::string> kind = StringField(doc, "kind", label, true);
  if (!kind.ok()) return kind.status();
  if (*kind != "CredentialProviderResponse") {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": the answer's kind is not CredentialProviderResponse"));
  }
  absl::StatusOr<std::string> api = StringField(doc, "apiVersion", label, true);
  if (!api.ok()) return api.status();
  if (*api != api_version) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": the answer's apiVersion is not the request's ", api_version));
  }
  KubeletCredentialResponse r;
  absl::StatusOr<std::string> key_type = StringField(doc, "cacheKeyType", label, true);
  if (!key_type.ok()) return key_type.status();
  if (*key_type == "Image") {
    r.cache_key_type = CredentialCacheKeyType::kImage;
  } else if (*key_type == "Registry") {
    r.cache_key_type = CredentialCacheKeyType::kRegistry;
  } else if (*key_type == "Global") {
    r.cache_key_type = CredentialCacheKeyType::kGlobal;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": cacheKeyType must be Image, Registry or Global"));
  }
  absl::StatusOr<std::string> dur = StringField(doc, "cacheDuration", label, false);
  if (!dur.ok()) return dur.status();
  if (!dur->empty()) {
    absl::StatusOr<absl::Duration> d = ParseGoDuration(*dur);
    if (!d.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(label, ": cacheDuration is not a duration"));
    }
    r.cache_duration = *d;
  }
  if (auto a = doc.find("auth"); a != doc.end() && !a->is_null()) {
    if (!a->is_object()) return absl::InvalidArgumentError(label + ": \"auth\" must be an object");
    for (const auto& item : a->items()) {
      std::string at = absl::StrCat(label, ": auth entry \"", item.key(), "\"");
      if (!item.value().is_object()) return absl::InvalidArgumentError(at + " must be an object");
      absl::StatusOr<std::string> u = StringField(item.value(), "username", at, false);
      if (!u.ok()) return u.status();
      absl::StatusOr<std::string> pw = StringField(item.value(), "password", at, false);
      if (!pw.ok()) return pw.status();
      r.auth[item.key()] = Credential{*std::move(u), *std::move(pw), "", ""};
    }
  }
  return r;
}

absl::StatusOr<std::unique_ptr<KubeletCredentialProviders>> KubeletCredentialProviders::Create(
    Options options) {
  std::ifstream in(options.config_path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read credential provider config ", options.config_path));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  absl::StatusOr<std::vector<KubeletCredentialProvider>> parsed =
      ParseCredentialProviderConfig(ss.str(), options.config_path);
  if (!parsed.ok()) return parsed.status();
  std::unique_ptr<KubeletCredentialProviders> k(new KubeletCredentialProviders(std::move(options)));
  k->clock_ = k->options_.clock != nullptr ? k->options_.clock : Clock::Real();
  for (KubeletCredentialProvider& p : *parsed) {
    std::string path = k->options_.bin_dir + "/" + p.name;
    if (access(path.c_str(), X_OK) != 0) {
      return absl::NotFoundError(absl::StrCat("credential provider \"", p.name, "\" (",
                                              k->options_.config_path, "): no executable ", path));
    }
    auto provider = std::make_unique<Provider>();
    provider->config = std::move(p);
    k->providers_.push_back(std::move(provider));
  }
  return k;
}

absl::StatusOr<std::optional<Credential>> KubeletCredentialProviders::Get(
    const std::string& registry) {
  // modelfs asks per registry: the registry is the image (see the file comment).
  const std::string& image = registry;
  for (const auto& p : providers_) {
    bool matches = false;
    for (const std::string& m : p->config.match_images) {
      if (KubeletImageMatches(m, image)) matches = true;
    }
    if (!matches) continue;
    auto cached = [&]() -> std::optional<std::optional<Credential>> {
      absl::MutexLock l(&mu_);
      absl::Time now = clock_->Now();
      for (const std::string& key : {image, registry, std::string()}) {
        auto it = cache_.find({p->config.name, key});
        if (it != cache_.end() && now < it->second.expires) return it->second.credential;
      }
      return std::nullopt;
    };
    if (auto c = cached(); c.has_value()) return *c;
    absl::MutexLock run(&p->run_mu);
    if (auto c = cached(); c.has_value()) return *c;  // run by another request meanwhile
    return Run(*p, image);
  }
  return std::optional<Credential>();
}

absl::StatusOr<std::optional<Credential>> KubeletCredentialProviders::Run(
    Provider& p, const std::string& image) {
  CredentialProcess proc;
  proc.argv.push_back(options_.bin_dir + "/" + p.config.name);
  for (const std::string& a : p.config.args) proc.argv.push_back(a);
  proc.env = p.config.env;
  proc.stdin_data = json{
      {"apiVersion", p.config.api_version},
      {"kind", "CredentialProviderRequest"},
      {"image", image}}.dump();
  proc.timeout = options_.plugin_timeout;
  proc.label = absl::StrCat("credential provider plugin ", p.config.name, " (",
                            options_.config_path, ") for image ", image);
  {
    absl::MutexLock l(&mu_);
    ++plugin_runs_;
  }
  absl::StatusOr<CredentialProcessResult> r = RunCredentialProcess(proc);
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return absl::UnauthenticatedError(
        absl::StrCat(proc.label, " failed with exit code ", r->exit_code));
  }
  absl::StatusOr<KubeletCredentialResponse> resp =
      ParseCredentialProviderResponse(r->stdout, p.config.api_version, proc.label);
  if (!resp.ok()) return resp.status();
  std::optional<Credential> best;
  size_t best_len = 0;
  for (const auto& [pattern, cred] : resp->auth) {
    if (KubeletImageMatches(pattern, image) && (!best.has_value() || pattern.size() > best_len)) {
      best = cred;
      best_len = pattern.size();
    }
  }
  absl::Duration ttl = resp->cache_duration.value_or(p.config.default_cache_duration);
  if (ttl > absl::ZeroDuration()) {
    std::string key;
    switch (resp->cache_key_type) {
      case CredentialCacheKeyType::kImage:
        key = image;
        break;
      case CredentialCacheKeyType::kRegistry:
        key = Split(image).host + (Split(image).port.empty() ? "" : ":" + Split(image).port);
        break;
      case CredentialCacheKeyType::kGlobal:
        key = "";
        break;
    }
    absl::MutexLock l(&mu_);
    cache_[{p.config.name, key}] = CachedAnswer{best, clock_->Now() + ttl};
  }
  return best;
}

void KubeletCredentialProviders::Invalidate(const std::string& registry) {
  absl::MutexLock l(&mu_);
  for (auto it = cache_.begin(); it != cache_.end();) {
    if (it->first.second == registry || it->first.second.empty()) {
      it = cache_.erase(it);
    } else {
      ++it;
    }
  }
}

int KubeletCredentialProviders::plugin_runs() const {
  absl::MutexLock l(&mu_);
  return plugin_runs_;
}

}  // namespace modelfs
