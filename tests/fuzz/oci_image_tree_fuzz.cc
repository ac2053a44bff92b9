// Fuzzes the merged tree of an image: the input is up to four tars separated by
// "\n--layer--\n", applied lowest first. Never aborts; an accepted tree has canonical paths,
// every parent a directory, and every file's extent inside its own layer's bytes.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/oci/image_tree.h"
#include "core/oci/path_safety.h"

using namespace modelfs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  constexpr std::string_view kSep = "\n--layer--\n";
  std::vector<std::string_view> tars;
  while (tars.size() < 3) {
    const size_t at = rest.find(kSep);
    if (at == std::string_view::npos) break;
    tars.push_back(rest.substr(0, at));
    rest.remove_prefix(at + kSep.size());
  }
  tars.push_back(rest);
  auto tree = MergeImageTars(tars);
  if (!tree.ok()) return 0;
  for (const auto& [path, node] : tree->nodes) {
    if (!CheckRelativePath(path).ok()) abort();
    const size_t slash = path.rfind('/');
    if (slash != std::string::npos) {
      auto parent = tree->nodes.find(path.substr(0, slash));
      if (parent == tree->nodes.end() || parent->second.type != ImageNodeType::kDirectory) abort();
    }
    if (node.type == ImageNodeType::kFile) {
      if (node.layer >= tars.size()) abort();
      const size_t n = tars[node.layer].size();
      if (node.offset > n || node.size > n - node.offset) abort();
    }
  }
  return 0;
}
