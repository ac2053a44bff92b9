// Early-return helpers for absl::Status / absl::StatusOr, which our abseil (20220623) lacks,
// and the mapping from a Status to the CLI's documented exit codes.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define MODELFS_STATUS_CONCAT_INNER(a, b) a##b
#define MODELFS_STATUS_CONCAT(a, b) MODELFS_STATUS_CONCAT_INNER(a, b)

// RETURN_IF_ERROR(expr): evaluates an absl::Status expression and returns it when not OK.
#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status modelfs_status_ = (expr);           \
    if (!modelfs_status_.ok()) return modelfs_status_; \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr): evaluates an absl::StatusOr<T>; on error returns its status,
// otherwise moves the value into lhs (which may be a declaration: `auto x`).
#define ASSIGN_OR_RETURN(lhs, expr) \
  MODELFS_ASSIGN_OR_RETURN_IMPL(MODELFS_STATUS_CONCAT(modelfs_statusor_, __LINE__), lhs, expr)
#define MODELFS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();      \
  lhs = std::move(tmp).value()

namespace modelfs {

// Exit codes of every modelfs command (documented in docs/cli.md):
//   0  success
//   1  verification failure: digest or size mismatch, refused path, registry rejection,
//      or any other failure while doing the work
//   2  bad input or usage: not a model, malformed file, missing file, bad reference or flag
inline constexpr int kExitOk = 0;
inline constexpr int kExitVerify = 1;
inline constexpr int kExitUsage = 2;

// Malformed or missing input is kInvalidArgument / kNotFound / kOutOfRange (truncated);
// a digest mismatch is kDataLoss; a refused path is kPermissionDenied.
inline int ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kUnimplemented:
      return kExitUsage;
    default:
      return kExitVerify;
  }
}

}  // namespace modelfs
