// WithCommas: a count written with thousands separators ("1,234,567"), the one form every
// human-readable report of modelfs (CLI output, inspection and memory reports, notes, benches)
// uses for byte counts, tensor counts and token counts.
//
// Thread safety: a pure function.
#pragma once

#include <cstdint>
#include <string>

namespace modelfs {

// Decimal digits of `n` with a ',' before every group of three counted from the right:
// 0 -> "0", 999 -> "999", 1000 -> "1,000", 1234567 -> "1,234,567".
std::string WithCommas(uint64_t n);

}  // namespace modelfs
