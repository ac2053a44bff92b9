// URL pieces the HTTP clients share: whose host a URL is on, and where a redirect points.
#pragma once

#include <string>
#include <string_view>

namespace modelfs {

// "scheme://authority" of a URL, lowercased; "" when it has no "://". Two URLs are on the same
// host exactly when their origins are equal: credentials go only to the origin they are for.
std::string UrlOrigin(std::string_view url);

// The URL a Location header points at, relative to the URL that answered: absolute,
// scheme-relative ("//host/p"), absolute-path ("/p", keeping the base's spelling of its
// origin) or relative to the base's directory.
std::string ResolveLocation(const std::string& base_url, const std::string& location);

// 301, 302, 303, 307 and 308: the answers a client follows to Location.
bool IsRedirectStatus(long status);

}  // namespace modelfs
