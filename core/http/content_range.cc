#include "core/http/content_range.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"

namespace modelfs {

std::optional<ContentRange> ParseContentRange(absl::string_view v) {
  v = absl::StripAsciiWhitespace(v);
  if (!absl::ConsumePrefix(&v, "bytes ") && !absl::ConsumePrefix(&v, "bytes=")) return std::nullopt;
  size_t slash = v.find('/');
  if (slash == absl::string_view::npos) return std::nullopt;
  absl::string_view range = v.substr(0, slash), total = v.substr(slash + 1);
  ContentRange cr;
  if (total != "*") {
    uint64_t t;
    if (!absl::SimpleAtoi(total, &t)) return std::nullopt;
    cr.total = t;
  }
  if (range != "*") {
    size_t dash = range.find('-');
    if (dash == absl::string_view::npos) return std::nullopt;
    uint64_t a, b;
    if (!absl::SimpleAtoi(range.substr(0, dash), &a) ||
        !absl::SimpleAtoi(range.substr(dash + 1), &b) || b < a) {
      return std::nullopt;
    }
    cr.first = a;
    cr.last = b;
  }
  return cr;
}

}  // namespace modelfs
