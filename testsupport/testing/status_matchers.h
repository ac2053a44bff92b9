// GoogleTest matchers for absl::Status and absl::StatusOr (our abseil predates its own).
//   EXPECT_THAT(s, IsOk());
//   EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tensor 'w'")));
//   ASSERT_OK_AND_ASSIGN(auto v, MakeThing());
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace modelfs::testing {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

MATCHER(IsOk, "is OK") {
  const absl::Status& s = GetStatus(arg);
  if (!s.ok()) *result_listener << "status is " << s;
  return s.ok();
}

MATCHER_P2(StatusIs, code, message_matcher, "") {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code &&
         ::testing::ExplainMatchResult(message_matcher, std::string(s.message()), result_listener);
}

// StatusIs(code): any message.
MATCHER_P(StatusIs, code, "") {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code;
}

}  // namespace modelfs::testing

#define MODELFS_TESTING_CONCAT_INNER(a, b) a##b
#define MODELFS_TESTING_CONCAT(a, b) MODELFS_TESTING_CONCAT_INNER(a, b)
#define ASSERT_OK(expr) ASSERT_THAT((expr), ::modelfs::testing::IsOk())
#define EXPECT_OK(expr) EXPECT_THAT((expr), ::modelfs::testing::IsOk())
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL(MODELFS_TESTING_CONCAT(statusor_, __LINE__), lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL(tmp, lhs, expr)        \
  auto tmp = (expr);                                     \
  ASSERT_TRUE(tmp.ok()) << "status is " << tmp.status(); \
  lhs = std::move(tmp).value()
