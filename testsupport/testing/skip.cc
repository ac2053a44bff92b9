#include "testsupport/testing/skip.h"

#include <stdlib.h>

#include <string_view>

namespace modelfs::testing {

bool InCi() {
  const char* ci = getenv("CI");
  return ci != nullptr && std::string_view(ci) == "true";
}

}  // namespace modelfs::testing
