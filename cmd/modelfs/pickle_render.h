// Rendering of a PickleScan (core/formats/pickle_scan.h) for `modelfs inspect`: JSON for
// --json and text for a terminal. Only the CLI prints scans, so this lives beside its commands.
//
// Thread safety: pure functions.
#pragma once

#include <string>

#include "core/formats/pickle_scan.h"
#include "nlohmann/json.hpp"

namespace modelfs::cli {

nlohmann::json PickleScanToJson(const PickleScan& scan);
// Text like:
//   pytorch_model.bin: PyTorch zip checkpoint, 1 pickle (archive/data.pkl, 1,234 bytes)
//   imports:
//     collections.OrderedDict             allowed     1 call
//     posix.system (os.system)            DANGEROUS   1 call   at byte 17 (STACK_GLOBAL)
//   verdict: 1 import outside the allow-list: posix.system
std::string RenderPickleScan(const PickleScan& scan);

}  // namespace modelfs::cli
