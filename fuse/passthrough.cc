// FUSE passthrough: the table of open handles (see passthrough.h).
#include "fuse/passthrough.h"

#include <stdio.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>
#include <utility>
#include <vector>

#include "core/base/log_event.h"
#include "fuse/kernel_protocol.h"

namespace modelfs {
namespace {

using fuse_internal::CloseBackingFile;
using fuse_internal::OpenBackingFile;

constexpr char kStateMagic[] = "modelfs-open-files 1";

}  // namespace

OpenFiles::OpenFiles(int dev_fd, std::string state_path, bool passthrough)
    : dev_fd_(dev_fd), state_path_(std::move(state_path)), passthrough_(passthrough) {
  // Handles of a predecessor that left no state behind are (almost surely) not ours.
  next_fh_ = (uint64_t{std::random_device{}()} << 24) | 1;
}

void OpenFiles::StartFresh() {
  absl::MutexLock lock(&mu_);
  SaveLocked();
}

OpenFiles::~OpenFiles() = default;

bool OpenFiles::passthrough() const {
  absl::MutexLock lock(&mu_);
  return passthrough_;
}

void OpenFiles::AddLocked(uint64_t fh, Handle h) {
  InodeState& s = inodes_[h.ino];
  if (h.mode == Mode::kPassthrough) {
    s.passthrough++;
    s.key = h.key;
    backing_[h.key].handles++;
  } else {
    s.cached++;
  }
  handles_[fh] = std::move(h);
}

OpenFiles::Decision OpenFiles::Open(uint64_t ino, int file_fd, const std::string& key) {
  absl::MutexLock lock(&mu_);
  Decision d;
  d.fh = next_fh_++;
  Handle h;
  h.ino = ino;
  const InodeState* s = nullptr;
  if (auto it = inodes_.find(ino); it != inodes_.end()) s = &it->second;
  if (s != nullptr && s->passthrough > 0) {
    // The kernel holds the inode in passthrough mode with this backing file: stay with it.
    h.mode = Mode::kPassthrough;
    h.key = s->key;
  } else if (passthrough_ && file_fd >= 0 && !key.empty() && (s == nullptr || s->cached == 0)) {
    auto b = backing_.find(key);
    if (b == backing_.end()) {
      absl::StatusOr<int32_t> id = OpenBackingFile(dev_fd_, file_fd);
      if (id.ok()) {
        b = backing_.emplace(key, Backing{*id, 0}).first;
      } else {
        // The same reason holds for every file of this cache: stop trying.
        passthrough_ = false;
        if (!warned_) {
          log::WriteToStderr(log::Warn("fuse", "passthrough off, files are served by the daemon")
                                 .Field("reason", id.status().message()));
          warned_ = true;
        }
      }
    }
    if (b != backing_.end()) {
      h.mode = Mode::kPassthrough;
      h.key = key;
    }
  }
  d.mode = h.mode;
  if (h.mode == Mode::kPassthrough) d.backing_id = backing_.at(h.key).id;
  AddLocked(d.fh, std::move(h));
  SaveLocked();
  return d;
}

void OpenFiles::Release(uint64_t fh) {
  absl::MutexLock lock(&mu_);
  auto it = handles_.find(fh);
  if (it == handles_.end()) return;
  Handle h = std::move(it->second);
  handles_.erase(it);
  InodeState& s = inodes_[h.ino];
  if (h.mode == Mode::kPassthrough) {
    s.passthrough--;
    auto b = backing_.find(h.key);
    if (b != backing_.end() && --b->second.handles == 0) {
      const int32_t id = b->second.id;
      backing_.erase(b);
      // The state must stop naming the id before the id goes: a successor must never use an
      // id that was closed (the kernel may give the number to another file).
      SaveLocked();
      CloseBackingFile(dev_fd_, id);
    }
  } else {
    s.cached--;
  }
  if (s.cached == 0 && s.passthrough == 0) inodes_.erase(h.ino);
  SaveLocked();
}

size_t OpenFiles::open_count(Mode mode) const {
  absl::MutexLock lock(&mu_);
  return std::count_if(handles_.begin(), handles_.end(),
                       [mode](const auto& kv) { return kv.second.mode == mode; });
}

// Written on every change, atomically (rename), without fsync: it must survive this process,
// not the machine (a reboot ends the connection it describes).
void OpenFiles::SaveLocked() {
  if (state_path_.empty()) return;
  std::ostringstream out;
  out << kStateMagic << "\npassthrough " << (passthrough_ ? 1 : 0) << "\n";
  for (const auto& [key, b] : backing_) out << "backing " << b.id << " " << key << "\n";
  for (const auto& [fh, h] : handles_) {
    out << "handle " << fh << " " << h.ino << " " << (h.mode == Mode::kPassthrough ? "p" : "c")
        << " " << (h.key.empty() ? "-" : h.key) << "\n";
  }
  const std::string tmp = state_path_ + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << out.str();
    if (!f.good()) return;
  }
  if (rename(tmp.c_str(), state_path_.c_str()) != 0) unlink(tmp.c_str());
}

void OpenFiles::Inherit() {
  absl::MutexLock lock(&mu_);
  handles_.clear();
  inodes_.clear();
  backing_.clear();
  passthrough_ = false;
  std::ifstream in(state_path_);
  std::string line;
  if (state_path_.empty() || !std::getline(in, line) || line != kStateMagic) {
    SaveLocked();
    return;
  }
  bool passthrough = false;
  absl::flat_hash_map<std::string, int32_t> ids;
  std::vector<std::pair<uint64_t, Handle>> handles;
  bool ok = true;
  while (ok && std::getline(in, line)) {
    std::istringstream f(line);
    std::string kind;
    f >> kind;
    if (kind == "passthrough") {
      int v = 0;
      ok = static_cast<bool>(f >> v);
      passthrough = v == 1;
    } else if (kind == "backing") {
      int32_t id = 0;
      std::string key;
      ok = static_cast<bool>(f >> id >> key) && id > 0;
      if (ok) ids[key] = id;
    } else if (kind == "handle") {
      uint64_t fh = 0;
      Handle h;
      std::string mode, key;
      ok = static_cast<bool>(f >> fh >> h.ino >> mode >> key) && (mode == "p" || mode == "c");
      h.mode = mode == "p" ? Mode::kPassthrough : Mode::kCached;
      if (h.mode == Mode::kPassthrough) h.key = key;
      if (ok) handles.emplace_back(fh, std::move(h));
    } else {
      ok = false;
    }
  }
  if (!ok) {
    log::WriteToStderr(
        log::Warn("fuse", "passthrough state is damaged; serving every new open from the daemon")
            .Field("file", state_path_));
    SaveLocked();
    return;
  }
  passthrough_ = passthrough;
  for (const auto& [key, id] : ids) backing_[key] = Backing{id, 0};
  for (auto& [fh, h] : handles) {
    if (h.mode == Mode::kPassthrough && !backing_.contains(h.key)) continue;  // cannot be
    next_fh_ = std::max(next_fh_, fh + 1);
    AddLocked(fh, std::move(h));
  }
  // Ids no handle uses any more: the predecessor died before it dropped them. They leave the
  // state before they are closed.
  std::vector<int32_t> unused;
  for (auto it = backing_.begin(); it != backing_.end();) {
    if (it->second.handles == 0) {
      unused.push_back(it->second.id);
      backing_.erase(it++);
    } else {
      ++it;
    }
  }
  SaveLocked();
  for (int32_t id : unused) CloseBackingFile(dev_fd_, id);
}

}  // namespace modelfs
