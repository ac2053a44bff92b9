// ApplyImageLayer: whiteouts first, then the layer's entries over the tree below.
#include "core/oci/image_tree.h"

#include "absl/strings/str_cat.h"
#include "core/oci/oci_json.h"
#include "core/oci/path_safety.h"
#include "core/status/status_macros.h"

namespace modelfs {

namespace {

using oci_json::AV;

std::string_view BaseName(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string_view Parent(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? std::string_view() : path.substr(0, slash);
}

std::string Join(std::string_view dir, std::string_view name) {
  return dir.empty() ? std::string(name) : absl::StrCat(AV(dir), "/", AV(name));
}

using Nodes = std::map<std::string, ImageNode>;

// Removes every node strictly under `dir` ("" = the whole tree), moving them into `removed`
// when given. Children of "a" sort in ["a/", "a0"): '0' follows '/'.
size_t EraseChildren(Nodes& nodes, const std::string& dir, Nodes* removed = nullptr) {
  auto first = dir.empty() ? nodes.begin() : nodes.lower_bound(dir + "/");
  auto last = dir.empty() ? nodes.end() : nodes.lower_bound(dir + "0");
  const size_t n = static_cast<size_t>(std::distance(first, last));
  if (removed != nullptr) removed->insert(first, last);
  nodes.erase(first, last);
  return n;
}

// Removes `path` and everything under it; whether anything was there.
bool EraseSubtree(Nodes& nodes, const std::string& path, Nodes* removed = nullptr) {
  auto it = nodes.find(path);
  const bool had = it != nodes.end();
  if (had) {
    if (removed != nullptr) removed->insert(*it);
    nodes.erase(it);
  }
  return EraseChildren(nodes, path, removed) != 0 || had;
}

// Every proper prefix of `path` must be a directory of the tree or absent (then made);
// never a link or a file, so nothing is written through either.
absl::Status EnsureParents(ImageTree& tree, std::string_view layer_name, const std::string& path) {
  for (size_t slash = path.find('/'); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    const std::string prefix = path.substr(0, slash);
    auto [it, made] = tree.nodes.try_emplace(prefix);
    if (made) {
      it->second.type = ImageNodeType::kDirectory;
      it->second.mode = 0755;
      continue;
    }
    if (it->second.type == ImageNodeType::kSymlink) {
      return absl::PermissionDeniedError(absl::StrCat(AV(layer_name), ": entry '", path,
                                                      "' would be written through the symlink '",
                                                      prefix, "'; refused"));
    }
    if (it->second.type == ImageNodeType::kFile) {
      return absl::PermissionDeniedError(absl::StrCat(AV(layer_name), ": entry '", path,
                                                      "' needs '", prefix,
                                                      "' to be a directory, not a file"));
    }
  }
  return absl::OkStatus();
}

// Puts `node` at `path`, replacing whatever was there (a directory replaced by anything else
// goes with its subtree; a directory over a directory keeps its children).
void Place(ImageTree& tree, const std::string& path, ImageNode node) {
  auto it = tree.nodes.find(path);
  if (it != tree.nodes.end() && it->second.type == ImageNodeType::kDirectory &&
      node.type != ImageNodeType::kDirectory) {
    EraseChildren(tree.nodes, path);
  }
  tree.nodes[path] = std::move(node);
}

}  // namespace

absl::Status ApplyImageLayer(ImageTree& tree, size_t layer, std::string_view layer_name,
                             const std::vector<TarEntry>& entries) {
  // Markers hide only what the layers below had: apply them all before any entry. A hard link
  // of this layer may still name what they hid (tar order: the link was made first).
  Nodes hidden;
  for (const TarEntry& e : entries) {
    const std::string_view base = BaseName(e.path);
    if (!base.starts_with(kWhiteoutPrefix)) continue;
    const std::string dir(Parent(e.path));
    if (base == kOpaqueWhiteout) {
      auto it = tree.nodes.find(dir);
      if (dir.empty() || (it != tree.nodes.end() && it->second.type == ImageNodeType::kDirectory)) {
        EraseChildren(tree.nodes, dir, &hidden);
        ++tree.counts.opaque_dirs;
      } else {
        ++tree.counts.ignored_whiteouts;
      }
      continue;
    }
    const std::string_view name = base.substr(kWhiteoutPrefix.size());
    // ".wh..wh.<x>" names are aufs metadata (hard-link directories), not whiteouts.
    if (name.starts_with(kWhiteoutPrefix)) {
      ++tree.counts.ignored_whiteouts;
      continue;
    }
    const std::string target = Join(dir, name);
    if (!CheckRelativePath(target).ok() || !EraseSubtree(tree.nodes, target, &hidden)) {
      ++tree.counts.ignored_whiteouts;  // ".wh.." or a path no lower layer had
      continue;
    }
    ++tree.counts.whiteouts;
  }
  for (const TarEntry& e : entries) {
    const std::string_view base = BaseName(e.path);
    if (base.starts_with(kWhiteoutPrefix)) {
      // An opaque directory exists in this layer even when the layer lists only its marker.
      if (base == kOpaqueWhiteout && !Parent(e.path).empty()) {
        const std::string dir(Parent(e.path));
        RETURN_IF_ERROR(EnsureParents(tree, layer_name, dir + "/"));
        auto it = tree.nodes.find(dir);
        if (it != tree.nodes.end() && it->second.type != ImageNodeType::kDirectory) {
          return absl::PermissionDeniedError(absl::StrCat(AV(layer_name), ": opaque marker '",
                                                          e.path, "' inside '", dir,
                                                          "', not a directory"));
        }
      }
      continue;
    }
    ImageNode node;
    node.mode = e.mode;
    switch (e.type) {
      case TarEntryType::kDirectory:
        node.type = ImageNodeType::kDirectory;
        break;
      case TarEntryType::kFile:
        node.type = ImageNodeType::kFile;
        node.layer = layer;
        node.offset = e.data_offset;
        node.size = e.size;
        break;
      case TarEntryType::kSymlink:
        if (e.linkname.empty()) {
          return absl::PermissionDeniedError(
              absl::StrCat(AV(layer_name), ": entry '", e.path, "': symlink with an empty target"));
        }
        node.type = ImageNodeType::kSymlink;
        node.link_target = e.linkname;
        break;
      case TarEntryType::kHardLink: {
        // linkname is canonical (the reader refused ".." and absolute ones); it must be a
        // regular file of the tree so far, never followed through a link or a directory.
        const ImageNode* target = nullptr;
        if (auto it = tree.nodes.find(e.linkname); it != tree.nodes.end()) {
          target = &it->second;
        } else if (auto h = hidden.find(e.linkname); h != hidden.end()) {
          target = &h->second;
        }
        if (target == nullptr || target->type != ImageNodeType::kFile) {
          return absl::PermissionDeniedError(
              absl::StrCat(AV(layer_name), ": entry '", e.path, "': hard link to '", e.linkname,
                           "', which is not a regular file of this or a lower layer"));
        }
        node = *target;
        ++tree.counts.hardlinks;
        break;
      }
      case TarEntryType::kOther:
        // What was there below is replaced by something modelfs does not serve.
        RETURN_IF_ERROR(EnsureParents(tree, layer_name, e.path));
        EraseSubtree(tree.nodes, e.path);
        ++tree.counts.skipped_special;
        continue;
    }
    RETURN_IF_ERROR(EnsureParents(tree, layer_name, e.path));
    Place(tree, e.path, std::move(node));
  }
  return absl::OkStatus();
}

absl::StatusOr<ImageTree> MergeImageTars(const std::vector<std::string_view>& tars) {
  ImageTree tree;
  for (size_t i = 0; i < tars.size(); ++i) {
    const std::string name = absl::StrCat("layer ", i);
    auto entries = IndexTarBytes(tars[i]);
    if (!entries.ok()) {
      return absl::Status(entries.status().code(),
                          absl::StrCat(name, ": ", entries.status().message()));
    }
    RETURN_IF_ERROR(ApplyImageLayer(tree, i, name, *entries));
  }
  return tree;
}

}  // namespace modelfs
