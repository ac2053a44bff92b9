// ModelTree: inode table, path validation, lookups, listings and reads.
#include "fuse/model_tree.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <set>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/oci/path_safety.h"
#include "core/status/status_macros.h"

namespace modelfs {

namespace {

constexpr char kErrnoPayloadUrl[] = "modelfs.dev/errno";
constexpr uint32_t kDirMode = S_IFDIR | 0555;
constexpr uint32_t kFileMode = S_IFREG | 0444;
constexpr uint32_t kExecutableFileMode = S_IFREG | 0555;
constexpr uint32_t kSymlinkMode = S_IFLNK | 0777;

// Splits a model-relative path into components after the one path check that pull and
// mount share (core/oci/path_safety.h), so both accept and refuse exactly the same names.
absl::StatusOr<std::vector<std::string>> SplitSafePath(const std::string& path) {
  RETURN_IF_ERROR(CheckRelativePath(path));
  return std::vector<std::string>(absl::StrSplit(path, '/'));
}

uint64_t HashIno(const std::string& full_path, uint64_t salt) {
  // NUL separates the fields: paths never contain one.
  std::string key = "modelfs-ino";
  key.push_back('\0');
  key += full_path;
  if (salt != 0) {
    key.push_back('\0');
    absl::StrAppend(&key, salt);
  }
  std::array<uint8_t, 32> raw = Digest::Of(key).raw();
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | raw[i];
  return v & 0x7fffffffffffffffULL;
}

}  // namespace

struct ModelTree::Node {
  enum class Kind { kDir, kLayer, kSynthetic, kSymlink };
  Kind kind = Kind::kDir;
  uint64_t ino = 0;
  uint64_t parent = 0;
  std::string path;  // from the root, "" for the root
  int64_t mtime = 0;
  uint64_t lookups = 0;  // kernel references (FUSE lookup count)
  bool attached = true;  // false once its model was removed

  std::map<std::string, uint64_t> children;  // kDir; sorted so listings are stable
  uint32_t subdirs = 0;                      // kDir

  Digest layer;  // kLayer
  uint64_t offset = 0;
  uint64_t size = 0;                         // kLayer and kSynthetic
  std::shared_ptr<const std::string> bytes;  // kSynthetic; null while a lazy file is not made
  std::shared_ptr<LazyBytes> lazy;           // kSynthetic made on first use
  std::string target;                        // kSymlink
  bool executable = false;                   // kLayer: 0555 instead of 0444
  std::shared_ptr<ServeGate> gate;           // kLayer, kSymlink: TreeFile::gate

  bool is_dir() const { return kind == Kind::kDir; }
};

// A lazy synthetic file's bytes, made once under its own lock (see model_tree.h).
struct ModelTree::LazyBytes {
  explicit LazyBytes(std::function<std::string()> f) : make(std::move(f)) {}
  std::shared_ptr<const std::string> Get() {
    absl::MutexLock lock(&mu);
    if (bytes == nullptr) bytes = std::make_shared<const std::string>(make());
    return bytes;
  }
  absl::Mutex mu;
  const std::function<std::string()> make;
  std::shared_ptr<const std::string> bytes ABSL_GUARDED_BY(mu);
};

bool NodeAttr::is_dir() const { return (mode & S_IFMT) == S_IFDIR; }

ModelTree::ModelTree(BlobReader* reader) : ModelTree(reader, /*single=*/false) {}

ModelTree::ModelTree(BlobReader* reader, bool single) : reader_(reader), single_(single) {
  auto root = std::make_unique<Node>();
  root->ino = kRootIno;
  root->parent = kRootIno;
  absl::MutexLock lock(&mu_);
  nodes_.emplace(kRootIno, std::move(root));
}

ModelTree::~ModelTree() = default;

absl::StatusOr<std::unique_ptr<ModelTree>> ModelTree::SingleModel(BlobReader* reader,
                                                                  std::vector<TreeFile> files,
                                                                  SyntheticFiles synthetic,
                                                                  ModelOptions options) {
  std::unique_ptr<ModelTree> tree(new ModelTree(reader, /*single=*/true));
  {
    absl::MutexLock lock(&tree->mu_);
    RETURN_IF_ERROR(tree->AddModelLocked("", std::move(files), std::move(synthetic), options));
  }
  return tree;
}

absl::Status ModelTree::AddModel(const std::string& model_name, std::vector<TreeFile> files,
                                 SyntheticFiles synthetic, ModelOptions options) {
  if (single_) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot add model '", model_name, "': this tree holds a single model"));
  }
  ASSIGN_OR_RETURN(std::vector<std::string> parts, SplitSafePath(model_name));
  if (parts.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("model name '", model_name, "' must be a single path component"));
  }
  absl::MutexLock lock(&mu_);
  if (models_.count(model_name) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("model '", model_name, "' is already mounted"));
  }
  return AddModelLocked(model_name, std::move(files), std::move(synthetic), options);
}

absl::Status ModelTree::AddModelLocked(const std::string& model_name, std::vector<TreeFile> files,
                                       SyntheticFiles synthetic, const ModelOptions& options) {
  // Stage every node keyed by its model-relative path ("" is the model directory), check the
  // whole set, and only then assign inodes and link it in, so a refused path adds nothing.
  std::map<std::string, std::unique_ptr<Node>> staged;
  auto model_dir = std::make_unique<Node>();
  model_dir->mtime = options.mtime_sec;
  staged.emplace("", std::move(model_dir));

  auto add_file = [&](const std::string& path, std::unique_ptr<Node> file) -> absl::Status {
    ASSIGN_OR_RETURN(std::vector<std::string> parts, SplitSafePath(path));
    std::string prefix;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      prefix = prefix.empty() ? parts[i] : absl::StrCat(prefix, "/", parts[i]);
      auto it = staged.find(prefix);
      if (it == staged.end()) {
        auto dir = std::make_unique<Node>();
        dir->mtime = options.mtime_sec;
        staged.emplace(prefix, std::move(dir));
      } else if (!it->second->is_dir()) {
        return absl::InvalidArgumentError(absl::StrCat("file path '", path, "' needs '", prefix,
                                                       "' to be a directory, but it is a file"));
      }
    }
    auto it = staged.find(path);
    if (it != staged.end()) {
      if (it->second->is_dir()) {
        return absl::InvalidArgumentError(
            absl::StrCat("file path '", path, "' is also a directory of other files"));
      }
      return absl::InvalidArgumentError(absl::StrCat("duplicate file path '", path, "'"));
    }
    file->mtime = options.mtime_sec;
    staged.emplace(path, std::move(file));
    return absl::OkStatus();
  };

  for (TreeFile& f : files) {
    if (f.kind == TreeFile::Kind::kDirectory) {
      // A directory of its own (an image's may be empty): made with its parents, once.
      auto it = staged.find(f.path);
      if (it != staged.end()) {
        if (it->second->is_dir()) continue;
        return absl::InvalidArgumentError(
            absl::StrCat("directory path '", f.path, "' is also a file"));
      }
      auto dir = std::make_unique<Node>();
      RETURN_IF_ERROR(add_file(f.path, std::move(dir)));
      continue;
    }
    if (f.kind == TreeFile::Kind::kSymlink) {
      if (f.symlink_target.empty() || f.symlink_target.find('\0') != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("symlink '", f.path, "' has an empty or NUL-bearing target"));
      }
      auto node = std::make_unique<Node>();
      node->kind = Node::Kind::kSymlink;
      node->target = f.symlink_target;
      node->size = f.symlink_target.size();
      node->gate = f.gate;
      RETURN_IF_ERROR(add_file(f.path, std::move(node)));
      continue;
    }
    if (f.layer.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("file '", f.path, "' has no layer digest"));
    }
    if (f.offset_in_layer + f.size < f.offset_in_layer) {
      return absl::InvalidArgumentError(absl::StrCat("file '", f.path, "' extent at ",
                                                     f.offset_in_layer, " size ", f.size,
                                                     " overflows layer ", f.layer.str()));
    }
    auto node = std::make_unique<Node>();
    node->kind = Node::Kind::kLayer;
    node->layer = f.layer;
    node->offset = f.offset_in_layer;
    node->size = f.size;
    node->executable = f.executable;
    node->gate = f.gate;
    RETURN_IF_ERROR(add_file(f.path, std::move(node)));
  }
  for (auto& [path, file] : synthetic) {
    auto node = std::make_unique<Node>();
    node->kind = Node::Kind::kSynthetic;
    if (file.lazy()) {
      node->lazy = std::make_shared<LazyBytes>(file.make());
    } else {
      node->size = file.bytes().size();
      node->bytes = std::make_shared<const std::string>(file.bytes());
    }
    RETURN_IF_ERROR(add_file(path, std::move(node)));
  }

  // Assign inodes in path order (so that collision resolution is deterministic) and link.
  const std::string base = model_name;  // "" for the root of a single-model tree
  auto full_path = [&](const std::string& rel) {
    if (rel.empty()) return base;
    return base.empty() ? rel : absl::StrCat(base, "/", rel);
  };
  absl::flat_hash_set<uint64_t> taken;
  for (auto& [rel, node] : staged) {
    node->path = full_path(rel);
    if (rel.empty() && single_) {
      node->ino = kRootIno;
      continue;
    }
    uint64_t salt = 0;
    uint64_t ino = 0;
    do {
      ino = HashIno(node->path, salt++);
    } while (ino <= kRootIno || nodes_.contains(ino) || taken.contains(ino));
    node->ino = ino;
    taken.insert(ino);
  }
  for (auto& [rel, node] : staged) {
    if (rel.empty()) continue;
    size_t slash = rel.rfind('/');
    std::string parent_rel = slash == std::string::npos ? "" : rel.substr(0, slash);
    std::string name = slash == std::string::npos ? rel : rel.substr(slash + 1);
    Node& parent = *staged.at(parent_rel);
    node->parent = parent.ino;
    parent.children.emplace(name, node->ino);
    if (node->is_dir()) ++parent.subdirs;
    total_bytes_ += node->size;
  }

  Node& root = *nodes_.at(kRootIno);
  if (single_) {
    // The staged model directory becomes the root: keep the root node, take the listing.
    Node& staged_root = *staged.at("");
    root.children = std::move(staged_root.children);
    root.subdirs = staged_root.subdirs;
    root.mtime = staged_root.mtime;
    attached_nodes_ += staged.size() - 1;
    for (auto& [rel, node] : staged) {
      if (!rel.empty()) nodes_.emplace(node->ino, std::move(node));
    }
    return absl::OkStatus();
  }
  Node& dir = *staged.at("");
  dir.parent = kRootIno;
  root.children.emplace(model_name, dir.ino);
  ++root.subdirs;
  models_.emplace(model_name, dir.ino);
  attached_nodes_ += staged.size();
  for (auto& [rel, node] : staged) nodes_.emplace(node->ino, std::move(node));
  return absl::OkStatus();
}

absl::Status ModelTree::RemoveModel(const std::string& model_name) {
  if (single_) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot remove model '", model_name, "': this tree holds a single model"));
  }
  absl::MutexLock lock(&mu_);
  auto it = models_.find(model_name);
  if (it == models_.end()) {
    return absl::NotFoundError(absl::StrCat("model '", model_name, "' is not mounted"));
  }
  uint64_t dir_ino = it->second;
  models_.erase(it);
  Node& root = *nodes_.at(kRootIno);
  root.children.erase(model_name);
  --root.subdirs;
  DetachLocked(dir_ino);
  return absl::OkStatus();
}

void ModelTree::DetachLocked(uint64_t ino) {
  std::vector<uint64_t> stack = {ino};
  while (!stack.empty()) {
    uint64_t cur = stack.back();
    stack.pop_back();
    auto it = nodes_.find(cur);
    if (it == nodes_.end()) continue;
    Node& node = *it->second;
    for (const auto& [name, child] : node.children) stack.push_back(child);
    node.attached = false;
    total_bytes_ -= node.size;
    --attached_nodes_;
    if (node.lookups == 0) nodes_.erase(it);
  }
}

bool ModelTree::HasModel(const std::string& model_name) const {
  absl::ReaderMutexLock lock(&mu_);
  return models_.count(model_name) != 0;
}

std::vector<std::string> ModelTree::Models() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [name, ino] : models_) out.push_back(name);
  return out;
}

const ModelTree::Node* ModelTree::FindLocked(uint64_t ino) const {
  auto it = nodes_.find(ino);
  return it == nodes_.end() ? nullptr : it->second.get();
}

NodeAttr ModelTree::AttrLocked(const Node& node) const {
  NodeAttr a;
  a.ino = node.ino;
  a.mtime_sec = node.mtime;
  if (node.is_dir()) {
    a.mode = kDirMode;
    a.nlink = 2 + node.subdirs;
    a.size = 4096;
  } else {
    a.mode = node.kind == Node::Kind::kSymlink ? kSymlinkMode
             : node.executable                 ? kExecutableFileMode
                                               : kFileMode;
    a.nlink = 1;
    a.size = node.size;
  }
  a.blocks = (a.size + 511) / 512;
  return a;
}

void ModelTree::MakeLazyFile(uint64_t ino) const {
  std::shared_ptr<LazyBytes> lazy;
  {
    absl::ReaderMutexLock lock(&mu_);
    const Node* node = FindLocked(ino);
    if (node == nullptr || node->lazy == nullptr || node->bytes != nullptr) return;
    lazy = node->lazy;
  }
  std::shared_ptr<const std::string> bytes = lazy->Get();  // may read through the BlobReader
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end() || it->second->bytes != nullptr) return;
  Node& node = *it->second;
  node.bytes = std::move(bytes);
  node.size = node.bytes->size();
  if (node.attached) total_bytes_ += node.size;
}

absl::StatusOr<NodeAttr> ModelTree::Lookup(uint64_t parent, const std::string& name) {
  // A lookup answers with the size, so a lazy file is made first (outside mu_).
  uint64_t child = 0;
  {
    absl::ReaderMutexLock lock(&mu_);
    const Node* dir = FindLocked(parent);
    if (dir != nullptr && dir->is_dir()) {
      auto it = dir->children.find(name);
      if (it != dir->children.end()) child = it->second;
    }
  }
  if (child != 0) MakeLazyFile(child);
  absl::MutexLock lock(&mu_);
  const Node* dir = FindLocked(parent);
  if (dir == nullptr || !dir->attached) {
    return absl::NotFoundError(absl::StrCat("lookup of '", name, "': no directory inode ", parent));
  }
  if (!dir->is_dir()) {
    return ErrnoStatus(
        absl::StatusCode::kFailedPrecondition, ENOTDIR,
        absl::StrCat("lookup of '", name, "' in '", dir->path, "': not a directory"));
  }
  uint64_t ino = 0;
  if (name == ".") {
    ino = dir->ino;
  } else if (name == "..") {
    ino = dir->parent;
  } else {
    auto it = dir->children.find(name);
    if (it == dir->children.end()) {
      return absl::NotFoundError(
          absl::StrCat("no entry '", name, "' in '", dir->path.empty() ? "/" : dir->path, "'"));
    }
    ino = it->second;
  }
  auto found = nodes_.find(ino);
  if (found == nodes_.end()) {
    return absl::NotFoundError(absl::StrCat("entry '", name, "' vanished"));
  }
  Node& node = *found->second;
  ++node.lookups;
  return AttrLocked(node);
}

void ModelTree::Forget(uint64_t ino, uint64_t nlookup) {
  if (ino == kRootIno) return;
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return;
  Node& node = *it->second;
  node.lookups -= std::min(nlookup, node.lookups);
  if (node.lookups == 0 && !node.attached) nodes_.erase(it);
}

bool ModelTree::LookupWouldMake(uint64_t parent, const std::string& name) const {
  absl::ReaderMutexLock lock(&mu_);
  const Node* dir = FindLocked(parent);
  if (dir == nullptr || !dir->is_dir()) return false;
  for (const auto& [child_name, child] : dir->children) {
    if (!name.empty() && child_name != name) continue;
    const Node* n = FindLocked(child);
    if (n != nullptr && n->lazy != nullptr && n->bytes == nullptr) return true;
  }
  return false;
}

absl::StatusOr<NodeAttr> ModelTree::GetAttr(uint64_t ino) const {
  MakeLazyFile(ino);
  absl::ReaderMutexLock lock(&mu_);
  const Node* node = FindLocked(ino);
  if (node == nullptr) return absl::NotFoundError(absl::StrCat("no inode ", ino));
  return AttrLocked(*node);
}

absl::StatusOr<std::vector<DirEntry>> ModelTree::ReadDir(uint64_t ino, uint64_t offset) const {
  absl::ReaderMutexLock lock(&mu_);
  const Node* dir = FindLocked(ino);
  if (dir == nullptr || !dir->attached) {
    return absl::NotFoundError(absl::StrCat("readdir: no directory inode ", ino));
  }
  if (!dir->is_dir()) {
    return ErrnoStatus(absl::StatusCode::kFailedPrecondition, ENOTDIR,
                       absl::StrCat("readdir of '", dir->path, "': not a directory"));
  }
  std::vector<DirEntry> out;
  uint64_t index = 0;
  auto emit = [&](const std::string& name, uint64_t child, bool is_dir, bool is_symlink = false) {
    if (index >= offset) out.push_back(DirEntry{name, child, is_dir, index + 1, is_symlink});
    ++index;
  };
  emit(".", dir->ino, true);
  emit("..", dir->parent, true);
  for (const auto& [name, child] : dir->children) {
    const Node* c = FindLocked(child);
    emit(name, child, c != nullptr && c->is_dir(), c != nullptr && c->kind == Node::Kind::kSymlink);
  }
  return out;
}

absl::Status ModelTree::Open(uint64_t ino, int flags) const {
  absl::ReaderMutexLock lock(&mu_);
  const Node* node = FindLocked(ino);
  if (node == nullptr) return absl::NotFoundError(absl::StrCat("open: no inode ", ino));
  if (node->is_dir()) {
    return ErrnoStatus(absl::StatusCode::kFailedPrecondition, EISDIR,
                       absl::StrCat("open of '", node->path, "': is a directory"));
  }
  if (node->kind == Node::Kind::kSymlink) {
    return ErrnoStatus(absl::StatusCode::kFailedPrecondition, ELOOP,
                       absl::StrCat("open of '", node->path, "': is a symbolic link"));
  }
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC) != 0) {
    return ErrnoStatus(absl::StatusCode::kPermissionDenied, EROFS,
                       absl::StrCat("open of '", node->path, "' for writing: read-only"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ModelTree::ReadLink(uint64_t ino) const {
  std::shared_ptr<ServeGate> gate;
  std::string target;
  std::string path;
  {
    absl::ReaderMutexLock lock(&mu_);
    const Node* node = FindLocked(ino);
    if (node == nullptr) return absl::NotFoundError(absl::StrCat("readlink: no inode ", ino));
    if (node->kind != Node::Kind::kSymlink) {
      return ErrnoStatus(absl::StatusCode::kInvalidArgument, EINVAL,
                         absl::StrCat("readlink of '", node->path, "': not a symbolic link"));
    }
    gate = node->gate;
    target = node->target;
    path = node->path;
  }
  // Outside mu_: the gate may read layers.
  if (gate != nullptr) {
    if (absl::Status st = gate->Wait(); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("readlink of '", path, "': ", st.message()));
    }
  }
  return target;
}

absl::Status ModelTree::OpenDir(uint64_t ino) const {
  absl::ReaderMutexLock lock(&mu_);
  const Node* node = FindLocked(ino);
  if (node == nullptr) return absl::NotFoundError(absl::StrCat("opendir: no inode ", ino));
  if (!node->is_dir()) {
    return ErrnoStatus(absl::StatusCode::kFailedPrecondition, ENOTDIR,
                       absl::StrCat("opendir of '", node->path, "': not a directory"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelTree::FileRef> ModelTree::FileOf(uint64_t ino, const char* op,
                                                     bool make_lazy) const {
  if (make_lazy) MakeLazyFile(ino);
  absl::ReaderMutexLock lock(&mu_);
  const Node* node = FindLocked(ino);
  if (node == nullptr) return absl::NotFoundError(absl::StrCat(op, ": no inode ", ino));
  if (node->is_dir()) {
    return ErrnoStatus(absl::StatusCode::kFailedPrecondition, EISDIR,
                       absl::StrCat(op, " of '", node->path, "': is a directory"));
  }
  if (node->kind == Node::Kind::kSymlink) {
    return ErrnoStatus(absl::StatusCode::kFailedPrecondition, ELOOP,
                       absl::StrCat(op, " of '", node->path, "': is a symbolic link"));
  }
  FileRef f;
  f.synthetic = node->kind == Node::Kind::kSynthetic;
  f.layer = node->layer;
  f.layer_offset = node->offset;
  f.size = node->size;
  f.bytes = node->bytes;
  f.path = node->path;
  f.gate = node->gate;
  return f;
}

absl::Status ModelTree::ReadError(const FileRef& f, uint64_t offset, const absl::Status& got) {
  // An unknown blob under an existing file is an I/O failure, not a missing file.
  absl::Status s(got.code(), absl::StrCat("reading '", f.path, "' at offset ", offset, " (layer ",
                                          f.layer.str(), " offset ", f.layer_offset + offset,
                                          "): ", got.message()));
  if (got.code() == absl::StatusCode::kNotFound) {
    s = ErrnoStatus(s.code(), EIO, std::string(s.message()));
  }
  return s;
}

absl::StatusOr<std::string> ModelTree::Read(uint64_t ino, uint64_t offset, uint64_t size) const {
  ASSIGN_OR_RETURN(FileRef f, FileOf(ino, "read"));
  // No lock is held: BlobReader may fetch from the network.
  if (offset >= f.size || size == 0) return std::string();
  const uint64_t length = std::min(size, f.size - offset);
  if (f.synthetic) return f.bytes->substr(offset, length);
  if (f.gate != nullptr) {
    if (absl::Status st = f.gate->Wait(); !st.ok()) return ReadError(f, offset, st);
  }

  absl::StatusOr<std::string> got = reader_->Read(f.layer, f.layer_offset + offset, length);
  if (!got.ok()) return ReadError(f, offset, got.status());
  if (got->size() != length) {
    return absl::DataLossError(absl::StrCat("reading '", f.path, "' at offset ", offset, ": layer ",
                                            f.layer.str(), " returned ", got->size(),
                                            " bytes where the file needs ", length));
  }
  return got;
}

absl::StatusOr<std::vector<BlobSpan>> ModelTree::ReadSpans(uint64_t ino, uint64_t offset,
                                                           uint64_t size) const {
  ASSIGN_OR_RETURN(FileRef f, FileOf(ino, "read"));
  std::vector<BlobSpan> spans;
  if (offset >= f.size || size == 0) return spans;
  const uint64_t length = std::min(size, f.size - offset);
  if (f.synthetic) {
    BlobSpan span;
    span.offset = offset;
    span.length = length;
    span.memory = f.bytes;
    spans.push_back(std::move(span));
    return spans;
  }
  if (f.gate != nullptr) {
    if (absl::Status st = f.gate->Wait(); !st.ok()) return ReadError(f, offset, st);
  }
  absl::StatusOr<std::vector<BlobSpan>> got =
      reader_->ReadSpans(f.layer, f.layer_offset + offset, length);
  if (!got.ok()) return ReadError(f, offset, got.status());
  uint64_t total = 0;
  for (const BlobSpan& span : *got) total += span.length;
  if (total != length) {
    return absl::DataLossError(absl::StrCat("reading '", f.path, "' at offset ", offset, ": layer ",
                                            f.layer.str(), " returned ", total,
                                            " bytes where the file needs ", length));
  }
  return got;
}

bool ModelTree::IsReady(uint64_t ino, uint64_t offset, uint64_t size) const {
  absl::StatusOr<FileRef> f = FileOf(ino, "read", /*make_lazy=*/false);
  if (f.ok() && f->synthetic && f->bytes == nullptr) return false;  // making it reads layers
  if (!f.ok() || f->synthetic || offset >= f->size || size == 0) return true;
  if (f->gate != nullptr && !f->gate->Passed()) return false;  // the check may read layers
  return reader_->IsReady(f->layer, f->layer_offset + offset, std::min(size, f->size - offset));
}

ModelTree::VerifiedFile ModelTree::OpenVerifiedFile(uint64_t ino) const {
  VerifiedFile out;
  absl::StatusOr<FileRef> f = FileOf(ino, "open", /*make_lazy=*/false);
  if (!f.ok() || f->synthetic) return out;
  if (f->gate != nullptr && !f->gate->Passed()) return out;  // read through Read, which waits
  out.fd = reader_->OpenVerifiedBlob(f->layer, f->layer_offset, f->size);
  if (out.fd >= 0) {
    out.key = f->layer.str();
    return out;
  }
  // A file inside a layer (a tar member) kept in a file of its own: keyed by layer and
  // offset, so two inodes share a backing file only when they are the same bytes.
  out.fd = reader_->OpenVerifiedFile(f->layer, f->layer_offset, f->size);
  if (out.fd >= 0) out.key = absl::StrCat(f->layer.str(), "@", f->layer_offset);
  return out;
}

FsStats ModelTree::StatFs() const {
  absl::ReaderMutexLock lock(&mu_);
  FsStats s;
  s.total_bytes = total_bytes_;
  s.files = attached_nodes_;
  return s;
}

absl::StatusOr<std::string> ModelTree::PathOf(uint64_t ino) const {
  absl::ReaderMutexLock lock(&mu_);
  const Node* node = FindLocked(ino);
  if (node == nullptr) return absl::NotFoundError(absl::StrCat("no inode ", ino));
  return node->path;
}

uint64_t ModelTree::LookupCount(uint64_t ino) const {
  absl::ReaderMutexLock lock(&mu_);
  const Node* node = FindLocked(ino);
  return node == nullptr ? 0 : node->lookups;
}

absl::Status ErrnoStatus(absl::StatusCode code, int errno_value, const std::string& message) {
  absl::Status s(code, message);
  s.SetPayload(kErrnoPayloadUrl, absl::Cord(absl::StrCat(errno_value)));
  return s;
}

int StatusToErrno(const absl::Status& status) {
  if (status.ok()) return 0;
  if (absl::optional<absl::Cord> payload = status.GetPayload(kErrnoPayloadUrl)) {
    int value = 0;
    if (absl::SimpleAtoi(std::string(*payload), &value) && value > 0) return value;
  }
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
      return ENOENT;
    case absl::StatusCode::kPermissionDenied:
      return EACCES;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return EINVAL;
    case absl::StatusCode::kAlreadyExists:
      return EEXIST;
    case absl::StatusCode::kUnimplemented:
      return ENOSYS;
    case absl::StatusCode::kResourceExhausted:
      return ENOMEM;
    default:
      return EIO;  // kDataLoss, kDeadlineExceeded, kUnavailable, kInternal, ...
  }
}

}  // namespace modelfs
