// WithCommas: a count written with thousands separators ("1,234,567"), the one form every
// human-readable report of modelfs (CLI output, inspection and memory reports, notes, benches)
// uses for byte counts, tensor counts and token counts. HumanBytes: a size in KiB/MiB/GiB for
// progress lines and tables. ParseByteSize: the one way a flag or a
// config value names a size ("64KiB", "4MiB", "1048576").
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace modelfs {

// Decimal digits of `n` with a ',' before every group of three counted from the right:
// 0 -> "0", 999 -> "999", 1000 -> "1,000", 1234567 -> "1,234,567".
std::string WithCommas(uint64_t n);

// A byte count in binary units with two decimals, for reports and progress lines:
// 512 -> "512 B", 1536 -> "1.50 KiB", 3 << 30 -> "3.00 GiB".
std::string HumanBytes(uint64_t n);

// A byte count: decimal digits, optionally followed by a binary unit K/KiB, M/MiB, G/GiB or
// T/TiB (case-insensitive; all powers of 1024): "65536", "64KiB", "4M", "1GiB".
// Errors: kInvalidArgument naming the text (empty, not a number, an unknown unit, overflow).
absl::StatusOr<uint64_t> ParseByteSize(std::string_view text);

}  // namespace modelfs
