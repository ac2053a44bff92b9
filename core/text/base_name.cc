#include "core/text/base_name.h"

namespace modelfs {

std::string BaseName(std::string_view path) {
  const size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

std::string LocationBaseName(std::string_view location) {
  return BaseName(location.substr(0, location.find_first_of("?#")));
}

}  // namespace modelfs
