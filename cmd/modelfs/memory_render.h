// Rendering of a MemoryReport (core/formats/memory.h) for `modelfs memory`: JSON for --json
// and text for a terminal. Only the CLI prints reports, so this lives beside its commands.
//
// Thread safety: pure functions.
#pragma once

#include <string>

#include "core/formats/memory.h"
#include "nlohmann/json.hpp"

namespace modelfs::cli {

// The report as JSON; every byte and token count is a plain JSON integer.
nlohmann::json MemoryReportToJson(const MemoryReport& report);

// The report as text for a terminal, with thousands separators, e.g.
//   kv cache f16: 32 layers x 8 KV heads x (128 + 128) dims = 131,072 bytes/token
//     32,768 tokens x 16 sequence(s) = 68,719,476,736 bytes (64.00 GiB)
std::string RenderMemoryReport(const MemoryReport& report);

}  // namespace modelfs::cli
