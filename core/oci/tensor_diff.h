// Comparing two models tensor by tensor (`modelfs diff`): files are matched by path, tensors
// within a file by name as the file stores it (no GGUF <-> Hugging Face name map: that lives in
// core/formats/tensor_names.h). A tensor is identical when dtype, shape and BLAKE3 digest agree.
// Pure: the inputs come from tensor indexes or from headers and hashed bytes (core/publish).
//
// Thread safety: plain values and a pure function.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/oci/tensor_index.h"

namespace modelfs {

// One weight file of a model as diff sees it.
struct TensorFileView {
  std::string path;
  std::vector<TensorEntry> tensors;
};

struct TensorChange {
  std::string name;
  TensorEntry a, b;
  bool dtype = false, shape = false, digest = false;  // what differs
};

struct TensorFileDiff {
  std::string path;
  bool in_a = true, in_b = true;
  std::vector<std::string> added;     // in B only, B's order
  std::vector<std::string> removed;   // in A only, A's order
  std::vector<TensorChange> changed;  // A's order
  std::vector<std::string> identical;
};

struct TensorDiff {
  std::vector<TensorFileDiff> files;  // by path
  uint64_t added = 0, removed = 0, changed = 0, identical = 0;
  bool same() const { return added == 0 && removed == 0 && changed == 0; }
};

TensorDiff DiffTensors(const std::vector<TensorFileView>& a, const std::vector<TensorFileView>& b);

}  // namespace modelfs
