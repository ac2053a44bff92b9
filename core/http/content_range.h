// The Content-Range header of a range answer, parsed once for every client.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace modelfs {

struct ContentRange {
  std::optional<uint64_t> first, last;  // absent for "bytes */N"
  std::optional<uint64_t> total;        // absent for "bytes a-b/*"
};

// Parses "bytes a-b/N", "bytes */N" and "bytes a-b/*" (also "bytes=" for servers that write
// it so), surrounding whitespace allowed. nullopt for anything else: no unit, no '/', a
// number that does not fit 64 bits, or a range whose last byte is before its first.
std::optional<ContentRange> ParseContentRange(absl::string_view value);

}  // namespace modelfs
