#include "core/http/curl_global.h"

#include <curl/curl.h>

namespace modelfs {

void EnsureCurlGlobalInit() {
  // A function-local static: C++ runs the initialiser once, and other threads wait for it.
  // Never undone (curl_global_cleanup at exit would race with threads still using curl).
  static const CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);
  (void)rc;  // a failure shows up as curl_easy_init returning null, which callers report
}

}  // namespace modelfs
