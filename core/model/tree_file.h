// TreeFile and SyntheticFiles: what model assembly (model_loader.h) produces and the filesystem
// (fuse/model_tree.h) serves: a model's regular files as extents of layer blobs, plus the
// synthetic files held in memory (.modelinfo.json). Plain values.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "core/oci/digest.h"

namespace modelfs {

// What must hold before any content of a file is served: its bytes, a link's target. A tree
// built from records nobody pinned (TarRecordsCheck, core/model/tar_records_check.h) shows its
// names and sizes at once but serves no byte until the records are found to be the layers' own.
// Thread-safe.
class ServeGate {
 public:
  virtual ~ServeGate() = default;
  // OK once it holds; blocks until that is known. Every later call gives the same answer.
  virtual absl::Status Wait() = 0;
  // Whether Wait would return OK at once. Never blocks.
  virtual bool Passed() const = 0;
};

// One regular file of a model: `size` bytes at `offset_in_layer` inside blob `layer`. The
// merged tree of a container image (core/oci/image_tree.h) also has symbolic links and
// directories that may be empty: those set `kind` and leave the extent empty.
struct TreeFile {
  enum class Kind { kFile, kSymlink, kDirectory };
  std::string path;  // relative, '/'-separated: "model.safetensors", "tokenizer/vocab.json"
  Digest layer;
  uint64_t offset_in_layer = 0;
  uint64_t size = 0;
  std::string digest_of_file;  // optional "sha256:..." of the file's bytes (for modelinfo)
  Kind kind = Kind::kFile;
  std::string symlink_target;  // kSymlink: served by readlink, never followed by modelfs
  // kFile of a container image whose tar mode has an execute bit: served 0555, not 0444, so a
  // container whose root is the image's tree (a modelcar's `sh`) can run it.
  bool executable = false;
  // kFile and kSymlink: nothing of the file (bytes, target) is served before gate->Wait() is
  // OK. nullptr: served at once.
  std::shared_ptr<ServeGate> gate;
};

// A synthetic file: bytes served from memory, either given or made by `make` the first time
// the file is looked up, stat'ed or read (once; concurrent first users wait for that one call).
// A lazy file costs nothing until someone asks for it: `.modelinfo.json` reads every weight
// file's header, which a pull or a pod that never opens the file should not pay for. Its size
// is only known once it is made, so its lookup makes it.
class SyntheticFile {
 public:
  SyntheticFile() = default;
  SyntheticFile(std::string bytes) : bytes_(std::move(bytes)) {}  // NOLINT: implicit by design
  SyntheticFile(const char* bytes) : bytes_(bytes) {}             // NOLINT
  static SyntheticFile Lazy(std::function<std::string()> make) {
    SyntheticFile f;
    f.make_ = std::move(make);
    return f;
  }
  bool lazy() const { return make_ != nullptr; }
  const std::string& bytes() const { return bytes_; }  // "" for a lazy file
  const std::function<std::string()>& make() const { return make_; }

 private:
  std::string bytes_;
  std::function<std::string()> make_;
};

// Synthetic files: relative path -> contents, served from memory.
using SyntheticFiles = std::map<std::string, SyntheticFile>;

}  // namespace modelfs
