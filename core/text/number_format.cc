#include "core/text/number_format.h"

#include <cctype>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace modelfs {

std::string WithCommas(uint64_t n) {
  const std::string digits = std::to_string(n);
  std::string out;
  out.reserve(digits.size() + digits.size() / 3);
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

std::string HumanBytes(uint64_t n) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(n);
  int unit = 0;
  while (v >= 1024.0 && unit < 5) {
    v /= 1024.0;
    ++unit;
  }
  if (unit == 0) return absl::StrFormat("%d B", n);
  return absl::StrFormat("%.2f %s", v, kUnits[unit]);
}

absl::StatusOr<uint64_t> ParseByteSize(std::string_view view) {
  const std::string text(view);  // abseil here takes absl::string_view, not std::string_view
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("size \"", text, "\" does not start with a number (e.g. 4MiB, 65536)"));
  }
  std::string unit(std::string_view(text).substr(digits));
  for (char& ch : unit) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  int shift = -1;
  if (unit.empty() || unit == "b") shift = 0;
  if (unit == "k" || unit == "kib") shift = 10;
  if (unit == "m" || unit == "mib") shift = 20;
  if (unit == "g" || unit == "gib") shift = 30;
  if (unit == "t" || unit == "tib") shift = 40;
  if (shift < 0) {
    return absl::InvalidArgumentError(absl::StrCat("size \"", text, "\": unit \"",
                                                   text.substr(digits),
                                                   "\" is not one of KiB, MiB, GiB, TiB"));
  }
  uint64_t n = 0;
  for (size_t i = 0; i < digits; ++i) {
    const uint64_t d = static_cast<uint64_t>(text[i] - '0');
    if (n > (UINT64_MAX - d) / 10) {
      return absl::InvalidArgumentError(absl::StrCat("size \"", text, "\" is too large"));
    }
    n = n * 10 + d;
  }
  if (shift > 0 && n > (UINT64_MAX >> shift)) {
    return absl::InvalidArgumentError(absl::StrCat("size \"", text, "\" is too large"));
  }
  return n << shift;
}

}  // namespace modelfs
