// Placeholder until the libcurl reader lands.
#include "core/io/range_reader.h"

namespace modelfs {
absl::StatusOr<std::unique_ptr<RangeReader>> OpenHttpRangeReader(const std::string& url,
                                                                 const HttpReaderOptions&) {
  return absl::UnimplementedError("http reader not built yet: " + url);
}
}  // namespace modelfs
