// Rendering of an inspection (core/formats/model_inspect.h) for `modelfs inspect`: JSON for
// --json and text for a terminal. Only the CLI prints inspections, so this lives beside its
// commands.
//
// Thread safety: pure functions.
#pragma once

#include <string>

#include "core/formats/model_inspect.h"
#include "nlohmann/json.hpp"

namespace modelfs::cli {

nlohmann::json InspectedFileToJson(const InspectedFile& file, bool with_tensors);
nlohmann::json InspectedModelToJson(const InspectedModel& model, bool with_tensors);
// Text like:
//   model.gguf: GGUF v3, 37 metadata keys, 272 tensors, data at byte 1,785,952
//   dtype  tensors  parameters  bytes  bits/weight ...
std::string RenderInspectedFile(const InspectedFile& file, bool with_tensors);

}  // namespace modelfs::cli
