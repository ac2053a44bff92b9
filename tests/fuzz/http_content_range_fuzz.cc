// Fuzzes ParseContentRange: whatever the bytes, an answer (never an abort); an accepted range
// has both ends or neither, its last byte not before its first, and written back in the
// canonical form it parses to the same numbers.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/http/content_range.h"

using namespace modelfs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::optional<ContentRange> cr = ParseContentRange(bytes);
  if (!cr.has_value()) return 0;
  if (cr->first.has_value() != cr->last.has_value()) abort();
  if (cr->first.has_value() && *cr->last < *cr->first) abort();
  const std::string range =
      cr->first.has_value() ? absl::StrCat(*cr->first, "-", *cr->last) : std::string("*");
  const std::string total = cr->total.has_value() ? absl::StrCat(*cr->total) : std::string("*");
  std::optional<ContentRange> again = ParseContentRange(absl::StrCat("bytes ", range, "/", total));
  if (!again.has_value() || again->first != cr->first || again->last != cr->last ||
      again->total != cr->total) {
    abort();
  }
  return 0;
}
