// ImageTree: the merged filesystem of an ordinary container image (a KServe modelcar, or any
// OCI / Docker image), built by applying its layers' tar entries in order the way containerd
// and overlayfs do, without touching a disk:
//   - a whiteout `.wh.<name>` removes <name> (and everything under it) of the layers below;
//   - an opaque marker `.wh..wh..opq` in directory D removes every child D had below;
//     whiteouts and opaque markers never hide entries of their own layer (OCI image spec,
//     "Whiteouts"), so each layer's markers are applied before its entries;
//   - regular files, directories and symbolic links are kept (a link only as its target
//     string: modelfs never follows one); a hard link becomes a second name for the bytes of
//     the regular file it names;
//   - devices, FIFOs and other special entries are skipped and counted.
// Hostile input is refused, never followed: an entry whose parent is a symlink or a file of
// the tree (it would be written through a link, or need a file to be a directory), a hard link
// to anything but a regular file already in the tree, an empty symlink target. Absolute names
// and `..` are refused earlier, by the tar reader (TarReadOptions::check_paths). A whiteout of
// a path no lower layer had is ignored and counted. Errors name the layer and the entry.
//
// Thread safety: ImageTree is a plain value; ApplyImageLayer is a pure function of its inputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/oci/tar.h"

namespace modelfs {

enum class ImageNodeType { kFile, kDirectory, kSymlink };

struct ImageNode {
  ImageNodeType type = ImageNodeType::kFile;
  // kFile: `size` bytes at `offset` of the (uncompressed) tar of layer number `layer`.
  size_t layer = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  std::string link_target;  // kSymlink: as written in the tar (may be absolute or have "..")
  uint32_t mode = 0;        // permission bits from the tar
  friend bool operator==(const ImageNode&, const ImageNode&) = default;
};

struct ImageTreeCounts {
  uint64_t whiteouts = 0;          // applied: they removed something
  uint64_t ignored_whiteouts = 0;  // of a path no lower layer had, or unknown `.wh..wh.` names
  uint64_t opaque_dirs = 0;
  uint64_t hardlinks = 0;
  uint64_t skipped_special = 0;  // devices, FIFOs, other types
  friend bool operator==(const ImageTreeCounts&, const ImageTreeCounts&) = default;
};

struct ImageTree {
  // Canonical relative path -> node. Every parent of a node is a kDirectory node.
  std::map<std::string, ImageNode> nodes;
  ImageTreeCounts counts;
};

inline constexpr std::string_view kWhiteoutPrefix = ".wh.";
inline constexpr std::string_view kOpaqueWhiteout = ".wh..wh..opq";

// Applies layer number `layer` (its entries in archive order, as IndexTar gives them with
// check_paths on) over `tree`. `layer_name` ("layer sha256:...") starts every error.
// Errors: kPermissionDenied "<layer_name>: entry '<path>': ..." for the hostile cases above.
// On error `tree` is partly changed and must be dropped.
absl::Status ApplyImageLayer(ImageTree& tree, size_t layer, std::string_view layer_name,
                             const std::vector<TarEntry>& entries);

// The merged tree of whole tars, lowest layer first (tests, the fuzz target). Errors: the tar
// reader's and ApplyImageLayer's, naming "layer <i>".
absl::StatusOr<ImageTree> MergeImageTars(const std::vector<std::string_view>& tars);

}  // namespace modelfs
