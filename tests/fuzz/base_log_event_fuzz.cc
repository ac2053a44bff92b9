// Fuzzes the log encoders with untrusted text in the message and a field: whatever the bytes,
// a logfmt line holds no control byte and splits into exactly its pairs, the JSON line parses
// as one object with those keys, and no journal field holds a newline.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "core/base/log_event.h"
#include "nlohmann/json.hpp"

using namespace modelfs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  const size_t cut = bytes.find('\0');
  const absl::string_view msg = bytes.substr(0, cut);
  const absl::string_view value = cut == absl::string_view::npos ? "" : bytes.substr(cut + 1);
  log::Event e(log::Level::kWarn, "cache", msg);
  e.Field("reason", value);
  const std::string line = log::FormatLine(e, absl::UnixEpoch(), log::Format::kLogfmt);
  int pairs = 0;
  for (size_t i = 0; i < line.size();) {
    const size_t eq = line.find('=', i);
    if (eq == std::string::npos) abort();
    size_t j = eq + 1;
    if (j < line.size() && line[j] == '"') {
      for (++j; j < line.size() && line[j] != '"'; ++j) {
        if (line[j] == '\\') ++j;
      }
      if (j >= line.size()) abort();  // unterminated quote
      ++j;
    } else {
      while (j < line.size() && line[j] != ' ') ++j;
    }
    ++pairs;
    if (j < line.size() && line[j] != ' ') abort();
    i = j + 1;
  }
  for (unsigned char c : line) {
    if (c < 0x20 || c == 0x7f) abort();
  }
  if (pairs != 5) abort();
  const nlohmann::json j =
      nlohmann::json::parse(log::FormatLine(e, absl::UnixEpoch(), log::Format::kJson), nullptr,
                            /*allow_exceptions=*/false);
  if (j.is_discarded() || j.size() != 5 || !j.contains("reason")) abort();
  for (const std::string& f : log::JournalFields(e, "x")) {
    if (f.find('\n') != std::string::npos) abort();
  }
  return 0;
}
