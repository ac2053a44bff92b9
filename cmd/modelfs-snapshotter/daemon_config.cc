// modelfs-snapshotter configuration (see daemon_config.h).
#include "cmd/modelfs-snapshotter/daemon_config.h"

#include <toml++/toml.h>

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/base/log_event.h"
#include "core/resolve/registry_clients.h"
#include "snapshotter/policy/model_hosts.h"

namespace modelfs::snapshotter {
namespace {

// "FILE:LINE: key: why", the line where the node at fault starts.
absl::Status KeyError(const std::string& source, const toml::node& at, const std::string& key,
                      const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ":", at.source().begin.line, ": ", key, ": ", why));
}

absl::Status CheckKeys(const toml::table& t, const std::set<std::string>& allowed,
                       const std::string& source, const std::string& prefix) {
  for (const auto& [k, v] : t) {
    std::string key(k.str());
    if (!allowed.count(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", k.source().begin.line, ": ", prefix, key, ": unknown key"));
    }
  }
  return absl::OkStatus();
}

absl::Status GetString(const toml::table& t, const char* key, const std::string& source,
                       const std::string& prefix, std::string& out) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return absl::OkStatus();
  if (!n->is_string()) return KeyError(source, *n, prefix + key, "must be a string");
  out = n->as_string()->get();
  return absl::OkStatus();
}

absl::Status GetBool(const toml::table& t, const char* key, const std::string& source,
                     const std::string& prefix, bool& out) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return absl::OkStatus();
  if (!n->is_boolean()) return KeyError(source, *n, prefix + key, "must be true or false");
  out = n->as_boolean()->get();
  return absl::OkStatus();
}

absl::Status GetNumber(const toml::table& t, const char* key, const std::string& source,
                       const std::string& prefix, double& out) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return absl::OkStatus();
  if (n->is_integer()) {
    out = static_cast<double>(n->as_integer()->get());
  } else if (n->is_floating_point()) {
    out = n->as_floating_point()->get();
  } else {
    return KeyError(source, *n, prefix + key, "must be a number");
  }
  return absl::OkStatus();
}

absl::Status GetStrings(const toml::table& t, const char* key, const std::string& source,
                        std::vector<std::string>& out) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return absl::OkStatus();
  const toml::array* a = n->as_array();
  if (a == nullptr) return KeyError(source, *n, key, "must be an array of strings");
  out.clear();
  for (const toml::node& e : *a) {
    if (!e.is_string()) return KeyError(source, e, key, "must be an array of strings");
    out.push_back(e.as_string()->get());
  }
  return absl::OkStatus();
}

// The keys the parser reads, by table ("" the top level). DaemonConfigKeys lists them.
const std::set<std::string>& TopKeys() {
  static const auto* keys = new std::set<std::string>{"root",
                                                      "address",
                                                      "hosts_dir",
                                                      "insecure_hosts",
                                                      "model_hosts",
                                                      "lazy_images",
                                                      "lazy_images_unpack_refused",
                                                      "docker_config",
                                                      "credential_provider_config",
                                                      "credential_provider_bin_dir",
                                                      "policy",
                                                      "require_equivalence",
                                                      "equivalence_keys",
                                                      "metrics_address",
                                                      "log_level",
                                                      "log_format",
                                                      "log_journal",
                                                      "containerd_address",
                                                      "admin_socket",
                                                      "cache",
                                                      "fuse"};
  return *keys;
}
const std::set<std::string>& CacheKeys() {
  static const auto* keys = new std::set<std::string>{
      "max_size_gib", "prefetch",       "read_deadline_s", "drop_served_pages",
      "audit",        "scrub_interval", "scrub_rate_mib",  "persist_delay"};
  return *keys;
}
const std::set<std::string>& FuseKeys() {
  static const auto* keys =
      new std::set<std::string>{"allow_other", "insecure_stream", "passthrough", "direct_io"};
  return *keys;
}

}  // namespace

std::vector<std::string> DaemonConfigKeys() {
  std::vector<std::string> out;
  for (const std::string& k : TopKeys()) {
    if (k != "cache" && k != "fuse") out.push_back(k);
  }
  for (const std::string& k : CacheKeys()) out.push_back("cache." + k);
  for (const std::string& k : FuseKeys()) out.push_back("fuse." + k);
  return out;
}

absl::Status ParseDaemonConfig(const std::string& text, const std::string& source,
                               DaemonConfig& c) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", e.source().begin.line, ": ", std::string(e.description())));
  }
  if (absl::Status st = CheckKeys(root, TopKeys(), source, ""); !st.ok()) {
    return st;
  }
  for (auto [key, out] : {std::pair<const char*, std::string*>{"root", &c.root},
                          {"address", &c.address},
                          {"hosts_dir", &c.hosts_dir},
                          {"docker_config", &c.docker_config},
                          {"credential_provider_config", &c.credential_provider_config},
                          {"credential_provider_bin_dir", &c.credential_provider_bin_dir},
                          {"policy", &c.policy},
                          {"metrics_address", &c.metrics_address},
                          {"log_level", &c.log_level},
                          {"log_format", &c.log_format},
                          {"log_journal", &c.log_journal},
                          {"containerd_address", &c.containerd_address},
                          {"admin_socket", &c.admin_socket}}) {
    if (absl::Status st = GetString(root, key, source, "", *out); !st.ok()) return st;
  }
  for (auto [key, out] :
       {std::pair<const char*, std::vector<std::string>*>{"insecure_hosts", &c.insecure_hosts},
        {"model_hosts", &c.model_hosts},
        {"lazy_images", &c.lazy_images},
        {"require_equivalence", &c.require_equivalence},
        {"equivalence_keys", &c.equivalence_keys}}) {
    if (absl::Status st = GetStrings(root, key, source, *out); !st.ok()) return st;
  }
  if (absl::Status st =
          GetBool(root, "lazy_images_unpack_refused", source, "", c.lazy_images_unpack_refused);
      !st.ok()) {
    return st;
  }
  if (const toml::node* n = root.get("cache")) {
    const toml::table* t = n->as_table();
    if (t == nullptr) return KeyError(source, *n, "cache", "must be a table");
    if (absl::Status st = CheckKeys(*t, CacheKeys(), source, "cache."); !st.ok()) {
      return st;
    }
    double gib = static_cast<double>(c.cache_max_size_gib);
    if (absl::Status st = GetNumber(*t, "max_size_gib", source, "cache.", gib); !st.ok()) return st;
    if (gib < 0)
      return KeyError(source, *t->get("max_size_gib"), "cache.max_size_gib", "must be >= 0");
    if (gib != static_cast<double>(static_cast<uint64_t>(gib))) {
      // A fraction would be truncated, and 0.5 would silently mean unbounded.
      return KeyError(source, *t->get("max_size_gib"), "cache.max_size_gib",
                      "must be a whole number of GiB");
    }
    c.cache_max_size_gib = static_cast<uint64_t>(gib);
    if (absl::Status st = GetString(*t, "prefetch", source, "cache.", c.prefetch); !st.ok())
      return st;
    if (absl::Status st = GetNumber(*t, "read_deadline_s", source, "cache.", c.read_deadline_s);
        !st.ok())
      return st;
    if (absl::Status st = GetBool(*t, "drop_served_pages", source, "cache.", c.drop_served_pages);
        !st.ok())
      return st;
    if (absl::Status st = GetBool(*t, "audit", source, "cache.", c.audit); !st.ok()) return st;
    if (absl::Status st = GetString(*t, "scrub_interval", source, "cache.", c.scrub_interval);
        !st.ok())
      return st;
    if (absl::Status st = GetNumber(*t, "scrub_rate_mib", source, "cache.", c.scrub_rate_mib);
        !st.ok())
      return st;
    if (absl::Status st = GetString(*t, "persist_delay", source, "cache.", c.persist_delay);
        !st.ok())
      return st;
  }
  if (const toml::node* n = root.get("fuse")) {
    const toml::table* t = n->as_table();
    if (t == nullptr) return KeyError(source, *n, "fuse", "must be a table");
    if (absl::Status st = CheckKeys(*t, FuseKeys(), source, "fuse."); !st.ok()) {
      return st;
    }
    if (absl::Status st = GetBool(*t, "allow_other", source, "fuse.", c.allow_other); !st.ok())
      return st;
    if (absl::Status st = GetBool(*t, "insecure_stream", source, "fuse.", c.insecure_stream);
        !st.ok())
      return st;
    if (absl::Status st = GetBool(*t, "passthrough", source, "fuse.", c.passthrough); !st.ok())
      return st;
    if (absl::Status st = GetBool(*t, "direct_io", source, "fuse.", c.direct_io); !st.ok())
      return st;
  }
  return absl::OkStatus();
}

namespace {

std::string TomlString(const std::string& v) {
  std::ostringstream out;
  out << toml::value<std::string>(v);
  return out.str();
}

std::string TomlStrings(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) absl::StrAppend(&out, i ? ", " : "", TomlString(v[i]));
  return out + "]";
}

std::string TomlNumber(double v) {
  std::ostringstream out;
  if (v == static_cast<double>(static_cast<int64_t>(v))) {
    out << static_cast<int64_t>(v);
  } else {
    out << toml::value<double>(v);
  }
  return out.str();
}

const char* TomlBool(bool v) { return v ? "true" : "false"; }

}  // namespace

std::string RenderDaemonConfig(const DaemonConfig& c) {
  std::string out;
  auto line = [&out](const char* key, const std::string& value) {
    absl::StrAppend(&out, key, " = ", value, "\n");
  };
  line("root", TomlString(c.root));
  line("address", TomlString(c.address));
  line("hosts_dir", TomlString(c.hosts_dir));
  line("insecure_hosts", TomlStrings(c.insecure_hosts));
  line("model_hosts", TomlStrings(c.model_hosts));
  line("lazy_images", TomlStrings(c.lazy_images));
  line("lazy_images_unpack_refused", TomlBool(c.lazy_images_unpack_refused));
  line("policy", TomlString(c.policy));
  line("require_equivalence", TomlStrings(c.require_equivalence));
  line("equivalence_keys", TomlStrings(c.equivalence_keys));
  line("docker_config", TomlString(c.docker_config));
  line("credential_provider_config", TomlString(c.credential_provider_config));
  line("credential_provider_bin_dir", TomlString(c.credential_provider_bin_dir));
  line("metrics_address", TomlString(c.metrics_address));
  line("containerd_address", TomlString(c.containerd_address));
  line("log_level", TomlString(c.log_level));
  line("log_format", TomlString(c.log_format));
  line("log_journal", TomlString(c.log_journal));
  line("admin_socket", TomlString(c.admin_socket));
  out += "\n[cache]\n";
  line("max_size_gib", TomlNumber(static_cast<double>(c.cache_max_size_gib)));
  line("prefetch", TomlString(c.prefetch));
  line("read_deadline_s", TomlNumber(c.read_deadline_s));
  line("drop_served_pages", TomlBool(c.drop_served_pages));
  line("audit", TomlBool(c.audit));
  line("scrub_interval", TomlString(c.scrub_interval));
  line("scrub_rate_mib", TomlNumber(c.scrub_rate_mib));
  line("persist_delay", TomlString(c.persist_delay));
  out += "\n[fuse]\n";
  line("allow_other", TomlBool(c.allow_other));
  line("insecure_stream", TomlBool(c.insecure_stream));
  line("passthrough", TomlBool(c.passthrough));
  line("direct_io", TomlBool(c.direct_io));
  return out;
}

absl::Status WithKeyLine(const absl::Status& error, const std::string& text,
                         const std::string& source) {
  const std::string message(error.message());
  const size_t end = message.find_first_not_of("abcdefghijklmnopqrstuvwxyz_.");
  const std::string key = message.substr(0, end);
  if (key.empty()) return error;
  toml::table root;
  try {
    root = toml::parse(text, std::string_view(source));
  } catch (const toml::parse_error&) {
    return error;
  }
  const toml::node* n = root.at_path(key).node();
  if (n == nullptr) return error;
  return absl::Status(error.code(),
                      absl::StrCat(source, ":", n->source().begin.line, ": ", message));
}

absl::StatusOr<std::string> ReadDaemonConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": no such config file"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string AdminSocketPath(const DaemonConfig& c) {
  if (!c.admin_socket.empty()) return c.admin_socket;
  return c.root.empty() || c.root.back() != '/' ? c.root + "/admin.sock" : c.root + "admin.sock";
}

absl::StatusOr<std::pair<std::string, uint16_t>> SplitHostPort(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics_address \"", address, "\": want host:port, e.g. 127.0.0.1:9464"));
  }
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  uint32_t port = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("metrics_address \"", address, "\": bad port"));
  }
  return std::make_pair(host, static_cast<uint16_t>(port));
}

absl::Status ValidateDaemonConfig(const DaemonConfig& c) {
  if (c.prefetch != "all" && c.prefetch != "headers" && c.prefetch != "none") {
    return absl::InvalidArgumentError(
        absl::StrCat("cache.prefetch \"", c.prefetch, "\": want all, headers or none"));
  }
  // The logging keys (docs/snapshotter.md, "Logs").
  if (!log::ParseLevel(c.log_level)) {
    return absl::InvalidArgumentError(
        absl::StrCat("log_level \"", c.log_level, "\": want debug, info, warn or error"));
  }
  if (!log::ParseFormat(c.log_format)) {
    return absl::InvalidArgumentError(
        absl::StrCat("log_format \"", c.log_format, "\": want logfmt or json"));
  }
  if (c.log_journal != "auto" && c.log_journal != "on" && c.log_journal != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("log_journal \"", c.log_journal, "\": want auto, on or off"));
  }
  if (!(c.read_deadline_s > 0)) {
    return absl::InvalidArgumentError("cache.read_deadline_s must be > 0");
  }
  for (auto [name, value] :
       {std::pair<const char*, const std::string*>{"root", &c.root}, {"address", &c.address}}) {
    if (value->empty() || value->front() != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " \"", *value, "\" must be an absolute path"));
    }
  }
  // Credentials: absolute paths, the two provider keys together, and files that parse (a
  // provider's plugin must be in the bin dir), so --check-config reports them.
  for (auto [name, value] :
       {std::pair<const char*, const std::string*>{"docker_config", &c.docker_config},
        {"credential_provider_config", &c.credential_provider_config},
        {"credential_provider_bin_dir", &c.credential_provider_bin_dir}}) {
    if (!value->empty() && value->front() != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " \"", *value, "\" must be an absolute path or \"\""));
    }
  }
  if (c.credential_provider_config.empty() != c.credential_provider_bin_dir.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(c.credential_provider_config.empty() ? "credential_provider_bin_dir"
                                                          : "credential_provider_config",
                     ": credential_provider_config and credential_provider_bin_dir go together"));
  }
  {
    RegistryAccessOptions access;
    access.docker_config = c.docker_config;
    access.default_docker_config = false;
    access.credential_provider_config = c.credential_provider_config;
    access.credential_provider_bin_dir = c.credential_provider_bin_dir;
    if (absl::StatusOr<std::shared_ptr<Keychain>> k = MakeKeychain(access); !k.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          c.credential_provider_config.empty() ? "docker_config" : "credential_provider_config",
          ": ", k.status().message()));
    }
  }
  if (!c.policy.empty() && c.policy.front() != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("policy \"", c.policy, "\" must be an absolute path or \"\""));
  }
  for (const std::string& k : c.equivalence_keys) {
    if (k.empty() || k.front() != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("equivalence_keys entry \"", k, "\" must be an absolute path"));
    }
  }
  for (const std::string& r : c.require_equivalence) {
    if (absl::Status st = CheckModelHostEntry(r); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("require_equivalence: ", st.message()));
    }
  }
  if (!c.require_equivalence.empty() && c.equivalence_keys.empty()) {
    return absl::InvalidArgumentError(
        "require_equivalence names repositories but equivalence_keys is empty");
  }
  if (!c.containerd_address.empty() && c.containerd_address.front() != '/') {
    return absl::InvalidArgumentError(absl::StrCat("containerd_address \"", c.containerd_address,
                                                   "\" must be an absolute path or \"\""));
  }
  if (!c.admin_socket.empty() && c.admin_socket.front() != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("admin_socket \"", c.admin_socket, "\" must be an absolute path or \"\""));
  }
  if (absl::Duration d; !absl::ParseDuration(c.scrub_interval, &d) || d < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache.scrub_interval \"", c.scrub_interval,
                     "\": want a duration such as \"24h\" or \"90m\", or \"0\" for no scrub"));
  }
  if (!(c.scrub_rate_mib > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache.scrub_rate_mib ", c.scrub_rate_mib, " must be > 0"));
  }
  if (absl::Duration d; !absl::ParseDuration(c.persist_delay, &d) || d < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache.persist_delay \"", c.persist_delay,
                     "\": want a duration such as \"30s\", or \"0\" to flush after every fetch"));
  }
  for (const std::string& entry : c.model_hosts) {
    // Compared with a reference's registry and repository, so a URL here would never match
    // and only look like it allows something.
    if (absl::Status st = CheckModelHostEntry(entry); !st.ok()) return st;
  }
  for (const std::string& entry : c.lazy_images) {
    if (absl::Status st = CheckModelHostEntry(entry); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("lazy_images: ", st.message()));
    }
  }
  if (!c.metrics_address.empty()) {
    if (absl::StatusOr<std::pair<std::string, uint16_t>> hp = SplitHostPort(c.metrics_address);
        !hp.ok()) {
      return hp.status();
    }
  }
  return absl::OkStatus();
}

}  // namespace modelfs::snapshotter
