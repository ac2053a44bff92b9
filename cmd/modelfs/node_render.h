// Rendering of `modelfs node ls` for a terminal, from the JSON that `--json` prints
// (docs/cli.md, "node ls --json", documents its fields). The JSON is made from the admin
// service's answer in node_command.cc; this half needs no gRPC, so its tests link it alone.
//
// Thread safety: pure functions.
#pragma once

#include <string>

#include "nlohmann/json.hpp"

namespace modelfs::cli {

// The node as a table: one line per model (M digest, reference, size, cached, verified,
// sealed, passthrough opens, snapshots, state) with its V, registry and snapshots under it;
// then the cache against its bound, quarantined or scrubbing layers, and registry errors.
// Missing fields render as empty; strings from the daemon are escaped (EscapeUntrusted).
std::string RenderNodeList(const nlohmann::json& node);

// One progress line of `node prefetch` ("fetching 3/5 layers, 1.20 GiB of 2.00 GiB verified").
std::string RenderPrefetchProgress(const nlohmann::json& progress);

}  // namespace modelfs::cli
