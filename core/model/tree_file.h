// TreeFile and SyntheticFiles: what model assembly (model_loader.h) produces and the filesystem
// (fuse/model_tree.h) serves: a model's regular files as extents of layer blobs, plus the
// synthetic files held in memory (.modelinfo.json). Plain values.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/oci/digest.h"

namespace modelfs {

// One regular file of a model: `size` bytes at `offset_in_layer` inside blob `layer`.
struct TreeFile {
  std::string path;  // relative, '/'-separated: "model.safetensors", "tokenizer/vocab.json"
  Digest layer;
  uint64_t offset_in_layer = 0;
  uint64_t size = 0;
  std::string digest_of_file;  // optional "sha256:..." of the file's bytes (for modelinfo)
};

// Synthetic files: relative path -> contents, served from memory.
using SyntheticFiles = std::map<std::string, std::string>;

}  // namespace modelfs
