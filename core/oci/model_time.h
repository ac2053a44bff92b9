// The one time a mounted model shows on every file and directory (mtime, ctime, atime): when
// the model was made, so that tools comparing mtimes (rsync, make, caches keyed on mtime) see
// the same value on every mount, restart and node. In order of preference:
//   1. M's ModelPack config descriptor.createdAt;
//   2. M's manifest annotation org.opencontainers.image.created;
//   3. V's manifest annotation org.opencontainers.image.created (when V was made);
//   4. the epoch (0), when none is present or none parses.
// A value that is present but is not RFC 3339 is passed over, not an error: a model is not
// refused for a malformed date.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/oci/manifest.h"
#include "core/oci/modelpack.h"

namespace modelfs {

// Seconds since the epoch of an RFC 3339 date and time ("2025-02-10T08:00:00.123Z",
// "2025-02-10T09:00:00+01:00"); fractions are dropped. nullopt when it does not parse.
std::optional<int64_t> ParseRfc3339Seconds(std::string_view text);

// M's own creation time as written (1, else 2 above), or nullopt. `config` may be null.
std::optional<std::string> ModelCreatedAt(const ModelPackConfig* config, const Manifest& model);

// The time every node of the mounted model shows (1 to 4 above). `config` and `volume` may be
// null.
int64_t ModelMtimeSeconds(const ModelPackConfig* config, const Manifest& model,
                          const Manifest* volume);

// Seconds as RFC 3339 in UTC, whole seconds ("2025-02-10T08:00:00Z").
std::string FormatRfc3339Seconds(int64_t seconds);

}  // namespace modelfs
