// UTF-8 validity as RFC 3629 defines it (no overlong forms, no surrogates, nothing past
// U+10FFFF), shared by the print escaping (escape.h) and the safetensors header check, which
// must agree with the reference parser's rejection of invalid UTF-8.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace modelfs {

// Length (2 to 4) and code point of the valid multi-byte UTF-8 sequence starting at s[i], or 0
// when the bytes there are not one (including a lone ASCII byte: callers handle those first).
// Requires i < s.size().
size_t DecodeUtf8(std::string_view s, size_t i, uint32_t* cp);

// Offset of the first byte of `s` that is not part of valid UTF-8, or std::string_view::npos.
size_t FindInvalidUtf8(std::string_view s);

}  // namespace modelfs
