// `modelfs node ls` as text (see node_render.h).
#include "cmd/modelfs/node_render.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/text/escape.h"
#include "core/text/number_format.h"

namespace modelfs::cli {
namespace {

using nlohmann::json;

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return "";
  return EscapeUntrusted(it->get<std::string>());
}

uint64_t Num(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned()) return 0;
  return it->get<uint64_t>();
}

bool Bool(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

// "sha256:0123456789ab" (the first 12 hex digits), as `docker images` shortens IDs.
std::string Short(const std::string& digest) { return digest.substr(0, 19); }

const json& Array(const json& j, const char* key) {
  static const json* const kEmpty = new json(json::array());
  auto it = j.find(key);
  return it != j.end() && it->is_array() ? *it : *kEmpty;
}

}  // namespace

std::string RenderNodeList(const json& node) {
  std::string out;
  const json& models = Array(node, "models");
  absl::StrAppend(
      &out, absl::StrFormat("%-19s  %10s  %10s  %10s  %-6s  %5s  %4s  %-7s  %s\n", "MODEL", "SIZE",
                            "CACHED", "VERIFIED", "SEALED", "OPENS", "SNAP", "STATE", "REFERENCE"));
  for (const json& m : models) {
    const json& snapshots = Array(m, "snapshots");
    absl::StrAppend(
        &out,
        absl::StrFormat("%-19s  %10s  %10s  %10s  %-6s  %5d  %4d  %-7s  %s\n",
                        Short(Str(m, "model_digest")), HumanBytes(Num(m, "size")),
                        HumanBytes(Num(m, "cached_bytes")), HumanBytes(Num(m, "verified_bytes")),
                        Bool(m, "sealed") ? "yes" : "no", Num(m, "passthrough_opens"),
                        snapshots.size(), Str(m, "state"), Str(m, "reference")));
    std::string from = Str(m, "registry").empty()
                           ? std::string("containerd's content store")
                           : absl::StrCat(Str(m, "registry"), "/", Str(m, "repository"));
    absl::StrAppend(&out, "    M ", Str(m, "model_digest"), " from ", from, "\n");
    if (!Str(m, "volume_digest").empty()) {
      absl::StrAppend(&out, "    V ", Str(m, "volume_digest"), "\n");
    }
    if (Bool(m, "prefetched")) absl::StrAppend(&out, "    held by node prefetch\n");
    if (!Str(m, "error").empty()) absl::StrAppend(&out, "    error: ", Str(m, "error"), "\n");
    for (const json& s : snapshots) {
      absl::StrAppend(&out, "    ", absl::StrFormat("%-9s", Str(s, "kind")), " ", Str(s, "key"));
      if (!Str(s, "container").empty()) absl::StrAppend(&out, "  container ", Str(s, "container"));
      if (!Str(s, "image").empty()) absl::StrAppend(&out, "  image ", Str(s, "image"));
      out += "\n";
    }
  }
  if (models.empty()) out += "(no models registered)\n";
  const json cache = node.contains("cache") ? node["cache"] : json::object();
  const uint64_t bound = Num(cache, "max_bytes");
  absl::StrAppend(&out, "\ncache: ", HumanBytes(Num(cache, "bytes")), " of ",
                  bound == 0 ? std::string("unbounded") : HumanBytes(bound), ", ",
                  Num(cache, "layers"), " layers",
                  Bool(cache, "disk_full") ? ", DISK FULL (serving uncached)" : "", "\n");
  const json& layers = Array(node, "layers");
  for (const json& l : layers) {
    std::string what = Bool(l, "quarantined") ? "quarantined" : "";
    if (Bool(l, "scrubbing")) absl::StrAppend(&what, what.empty() ? "" : ", ", "scrubbing");
    absl::StrAppend(&out, "layer ", Str(l, "digest"), " (", HumanBytes(Num(l, "size")), "): ", what,
                    "\n");
  }
  const json& errors = Array(node, "errors");
  if (!errors.empty()) out += "\nlast error per registry:\n";
  for (const json& e : errors) {
    absl::StrAppend(&out, "  ", Str(e, "registry"), "  ", Str(e, "at"), "  (", Num(e, "count"),
                    " in all)  ", Str(e, "message"), "\n");
  }
  return out;
}

std::string RenderPrefetchProgress(const json& p) {
  const std::string phase = Str(p, "phase");
  if (phase != "fetching" && phase != "done") return absl::StrCat(phase, " ...");
  return absl::StrCat(phase, " ", Num(p, "layers_sealed"), "/", Num(p, "layers"),
                      " layers sealed, ", HumanBytes(Num(p, "verified_bytes")), " of ",
                      HumanBytes(Num(p, "total_bytes")), " verified");
}

}  // namespace modelfs::cli
