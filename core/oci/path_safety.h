// Path checks for names that come from untrusted artifacts: layer path annotations
// (org.cncf.model.filepath, org.opencontainers.image.title) and tar entry names. A name that
// could escape the model's directory is refused with kPermissionDenied naming it.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace modelfs {

inline constexpr size_t kMaxPathBytes = 4096;      // PATH_MAX
inline constexpr size_t kMaxComponentBytes = 255;  // NAME_MAX

// OK only for a canonical relative path: non-empty, not absolute, no "", "." or ".."
// component (so no "//", no trailing "/"), no NUL or other control character (0x00-0x1f,
// 0x7f), no backslash (Windows separators that other tools would honour), at most
// kMaxPathBytes with components of at most kMaxComponentBytes.
// Errors: kPermissionDenied "refused path '<path>': <why>".
absl::Status CheckRelativePath(std::string_view path);

// Brings a harmless spelling into canonical form and then applies CheckRelativePath:
// drops "./" and "." components, repeated and trailing slashes ("./a//b/" -> "a/b").
// An absolute path or one with ".." is refused, never rewritten. The empty result (".", "./")
// is refused too; callers that accept a root entry check for it first (IsRootPath).
absl::StatusOr<std::string> NormalizeRelativePath(std::string_view path);

// True for spellings of the root directory itself: "", ".", "./", ".//".
bool IsRootPath(std::string_view path);

}  // namespace modelfs
