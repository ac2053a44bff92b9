// EscapeUntrusted: one line of printable text from a string someone else chose (a file or tensor
// name from an artifact, a registry's error body, a snapshot key from a gRPC caller), for the
// CLI's text output and the daemon's log. Without it a name holding "\n" forges a line of
// output ("verified ...") or of the log, and one holding ESC drives the reader's terminal.
// AppendJsonString: the other escaping of text written for someone else, a JSON string literal.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace modelfs {

// Valid UTF-8 is kept as it is, except:
//   '\\' -> "\\\\", '\n' -> "\\n", '\r' -> "\\r", '\t' -> "\\t";
//   other C0 controls and DEL (0x00-0x1f, 0x7f) -> "\\xNN";
//   C1 controls (U+0080-U+009F), line/paragraph separators (U+2028, U+2029) and bidirectional
//   overrides and isolates (U+202A-U+202E, U+2066-U+2069) -> "\\u{NNNN}";
// and a byte that is not part of valid UTF-8 -> "\\xNN". So the result holds no control
// character, and distinct inputs stay distinct.
std::string EscapeUntrusted(std::string_view s);

// Appends `s` to `out` as a JSON string literal, quotes included, escaped as serde_json writes
// it: '"' and '\\' with a backslash; '\b', '\f', '\n', '\r', '\t' by their short escapes;
// other C0 controls as "\\u00NN"; every other byte as it is (UTF-8 is not checked). Writers
// that must match a reference serializer byte for byte (the safetensors header) use it.
void AppendJsonString(std::string& out, std::string_view s);

}  // namespace modelfs
