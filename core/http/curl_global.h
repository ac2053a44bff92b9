// The one libcurl global initialisation of the process. curl_global_init is not thread-safe
// and must run once before any other libcurl call; every module that makes curl handles calls
// EnsureCurlGlobalInit() first instead of its own curl_global_init.
//
// Thread safety: may be called concurrently; the first call initialises, the rest wait for it.
#pragma once

namespace modelfs {

void EnsureCurlGlobalInit();

}  // namespace modelfs
