// LayerMembers (layer_members.h): Set (BlobCache::SetLayerMembers), which moves a tar layer's
// larger members into files of their own, and OpenVerifiedFile, which hands one out for FUSE
// passthrough once the layer is verified and sealed.
//
// Moving bytes that readers, flights and checks may be using at the same time:
//  1. The new layout gets empty member files; the chunks already on disk are copied into them
//     from the old layout (the layer file), outside the cache's lock. Chunks that land
//     meanwhile land in the old layout and are listed (CacheLayer::moved_dirty); they are
//     copied in the next round.
//  2. When few are left, the rest are copied under the lock and the new layout is installed:
//     from then on every read, landing and check uses it (a chunk written to the old layout
//     but marked after the switch is written again by LandChunk).
//  3. The member files are flushed and the layout journaled.
//  4. The old layout, with the member bytes still in the layer file, stays valid for whoever
//     still holds it (a span being sent, an audit); its ranges are hole-punched only when the
//     last holder lets go, so one copy of the bytes stays on disk. A sealed layer is then
//     sealed again over all its files.
// A crash anywhere leaves rows that are rechecked: a chunk recorded by an earlier process is
// re-hashed on its first read, through the layout the journal has, and fetched again if its
// bytes are not there; a seal that does not cover exactly the files there is not trusted.
#include "core/cache/layer_members.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/io/range_reader.h"
#include "core/oci/tar.h"
#include "core/status/status_macros.h"

namespace modelfs {

namespace {

bool OnDisk(ChunkState s) {
  return s == ChunkState::kPresent || s == ChunkState::kVerified || s == ChunkState::kRecorded;
}

// Whether bytes [from, to) meet a member of `layout` (sorted by offset).
bool MeetsMember(const std::vector<LayerMember>& layout, uint64_t from, uint64_t to) {
  auto it = std::upper_bound(
      layout.begin(), layout.end(), from,
      [](uint64_t off, const LayerMember& m) { return off < m.offset + m.length; });
  return it != layout.end() && it->offset < to;
}

}  // namespace

std::string LayerMembers::LocalIndexOf(const CacheLayer& layer) {
  std::string local;
  if (layer.mode == VerifyMode::kChunk || !layer.whole_verified ||
      layer.expected_algorithm != ChunkDigestAlgorithm::kSha256) {
    return local;
  }
  for (const auto& h : layer.expected) local.append(reinterpret_cast<const char*>(h.data()), 32);
  return local;
}

absl::StatusOr<std::shared_ptr<LayerSegments>> OpenMemberFiles(
    const LayerStore& store, const Digest& digest, int layer_fd,
    const std::vector<LayerMember>& layout, bool create, bool read_only) {
  std::vector<LayerSegments::File> files;
  files.reserve(layout.size());
  auto fail = [&](absl::Status s) {
    for (const LayerSegments::File& f : files) close(f.fd);
    close(layer_fd);
    return s;
  };
  if (layer_fd < 0) {
    return absl::InternalError(
        absl::StrCat("cache: cannot open the data file of layer ", digest.str()));
  }
  for (const LayerMember& m : layout) {
    int fd;
    if (create) {
      absl::StatusOr<int> created = store.CreateMember(digest, m.offset, m.length);
      if (!created.ok()) return fail(created.status());
      fd = *created;
    } else {
      fd = store.OpenMember(digest, m.offset, read_only);
      struct stat st;
      if (fd >= 0 && (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != m.length)) {
        close(fd);
        fd = -1;
      }
      if (fd < 0) {
        return fail(absl::DataLossError(
            absl::StrCat("cache: member file ", store.MemberPathOf(digest, m.offset), " of layer ",
                         digest.str(), " is missing or not ", m.length, " bytes")));
      }
    }
    files.push_back(LayerSegments::File{m.offset, m.length, fd});
  }
  return std::make_shared<LayerSegments>(layer_fd, std::move(files));
}

absl::Status LayerMembers::Set(const Digest& digest,
                               const std::vector<std::pair<uint64_t, uint64_t>>& files) {
  std::vector<LayerMember> layout;
  for (const auto& [offset, length] : files) {
    if (length > 0 && length >= options_.member_min_bytes) layout.push_back({offset, length});
  }
  std::sort(layout.begin(), layout.end(),
            [](const LayerMember& a, const LayerMember& b) { return a.offset < b.offset; });

  // Said in the log too: the loader goes on without member files.
  auto refuse = [&](absl::Status s) {
    Log(log::Warn("cache", absl::StrCat("its files stay in the layer's data file: ", s.message())));
    return s;
  };
  absl::MutexLock members_lock(&mu_);
  std::shared_ptr<CacheLayer> layer;
  std::shared_ptr<const LayerSegments> old;
  std::vector<uint64_t> todo;
  uint64_t gen = 0;
  int punch_fd = -1;
  {
    TableLock lock(table_);
    layer = table_.Find(digest);
    if (!layer) {
      return absl::NotFoundError(absl::StrCat("cache: nothing known about layer ", digest.str()));
    }
    LayerGuard held(*layer, Held(table_));
    uint64_t end = 0;
    for (const LayerMember& m : layout) {
      if (m.offset > layer->size || m.length > layer->size - m.offset) {
        return refuse(absl::InvalidArgumentError(
            absl::StrCat("cache: layer ", digest.str(), " (", layer->size, " bytes) has no file [",
                         m.offset, ", ", m.offset + m.length, ")")));
      }
      if (m.offset < end) {
        return refuse(absl::InvalidArgumentError(absl::StrCat("cache: layer ", digest.str(),
                                                              ": the file at offset ", m.offset,
                                                              " overlaps the one before it")));
      }
      end = m.offset + m.length;
    }
    if (layer->quarantined) {
      return absl::DataLossError(
          absl::StrCat("layer ", digest.str(), " is quarantined (failed verification)"));
    }
    old = layer->Segments();
    if (old->has_members()) {
      if (old->layout() == layout) return absl::OkStatus();
      return refuse(absl::FailedPreconditionError(
          absl::StrCat("cache: layer ", digest.str(), " already keeps ", old->members().size(),
                       " member files; its layout does not change")));
    }
    if (layout.empty()) return absl::OkStatus();
    // The layer file must be writable to free the moved bytes: a sealed file opened read-only
    // is reopened (the same inode); one with fs-verity cannot be, and keeps its bytes whole.
    punch_fd = layer->read_only
                   ? open(absl::StrCat("/proc/self/fd/", layer->fd).c_str(), O_RDWR | O_CLOEXEC)
                   : fcntl(layer->fd, F_DUPFD_CLOEXEC, 0);
    if (punch_fd < 0) {
      return refuse(absl::FailedPreconditionError(absl::StrCat(
          "cache: the data file of layer ", digest.str(), " cannot be written (fs-verity?)")));
    }
    gen = layer->gen.load();
    layer->moving = true;
    layer->moved_dirty.clear();
    for (uint64_t c = 0; c < layer->count(); ++c) {
      const uint64_t from = c * layer->chunk_size;
      if (OnDisk(layer->state[c]) && MeetsMember(layout, from, from + layer->ChunkLen(c))) {
        todo.push_back(c);
      }
    }
  }
  auto stop_moving = [&] {
    LayerLock lock(table_, *layer);
    layer->moving = false;
    layer->moved_dirty.clear();
  };

  absl::StatusOr<std::shared_ptr<LayerSegments>> fresh =
      OpenMemberFiles(store_, digest, fcntl(layer->fd, F_DUPFD_CLOEXEC, 0), layout, /*create=*/true,
                      /*read_only=*/false);
  if (!fresh.ok()) {
    close(punch_fd);
    stop_moving();
    store_.RemoveMembers(digest);
    return refuse(fresh.status());
  }
  const std::shared_ptr<const LayerSegments> next = *fresh;
  std::string buf;
  // Copies the member bytes of chunk `c` from the old layout to the new one.
  auto copy = [&](uint64_t c) -> absl::Status {
    const uint64_t from = c * layer->chunk_size, to = from + layer->ChunkLen(c);
    uint64_t at = from;
    for (const LayerSegments::Piece& p : next->Pieces(from, to)) {
      if (p.fd != next->layer_fd()) {
        buf.resize(p.length);
        RETURN_IF_ERROR(old->ReadFull(store_, digest, buf.data(), p.length, at));
        if (int err = store_.Write(p.fd, buf.data(), p.length, p.file_offset); err != 0) {
          return absl::Status(
              err == ENOSPC || err == EDQUOT ? absl::StatusCode::kResourceExhausted
                                             : absl::StatusCode::kInternal,
              absl::StrCat("cache: writing the member file at offset ", at - p.file_offset,
                           " of layer ", digest.str(), ": ", strerror(err)));
        }
      }
      at += p.length;
    }
    return absl::OkStatus();
  };

  absl::Status st;
  for (int round = 0; st.ok(); ++round) {
    for (uint64_t c : todo) {
      st = copy(c);
      if (!st.ok()) break;
    }
    if (!st.ok()) break;
    todo.clear();
    LayerLock lock(table_, *layer);
    if (layer->gen.load() != gen || table_.Find(digest) != layer) {
      st = absl::AbortedError(
          absl::StrCat("cache: layer ", digest.str(), " was dropped while its files moved"));
      break;
    }
    for (uint64_t c : layer->moved_dirty) {
      const uint64_t from = c * layer->chunk_size;
      if (MeetsMember(layout, from, from + layer->ChunkLen(c))) todo.push_back(c);
    }
    layer->moved_dirty.clear();
    if (todo.size() > 4 && round < 8) continue;
    // The last few under the lock, so that nothing lands in between; then the switch.
    for (uint64_t c : todo) {
      st = copy(c);
      if (!st.ok()) break;
    }
    if (!st.ok()) break;
    layer->SetSegments(next);
    layer->moving = false;
    break;
  }
  if (!st.ok()) {
    close(punch_fd);
    stop_moving();
    store_.RemoveMembers(digest);
    return refuse(st);
  }

  // Flushed and journaled before the old copy is freed: a restart then finds every moved byte
  // where its journal says.
  absl::Status synced = next->Sync(store_, digest);
  std::vector<std::pair<uint64_t, uint64_t>> rows;
  for (const LayerMember& m : layout) rows.emplace_back(m.offset, m.length);
  if (synced.ok()) synced = journal_.RecordMembers(digest.str(), rows);
  // Freed once the last reader of the old layout lets go (now, usually).
  std::vector<std::pair<uint64_t, uint64_t>> moved;
  for (const LayerMember& m : layout) moved.emplace_back(m.offset, m.offset + m.length);
  old->PunchOnRelease(punch_fd, std::move(moved));
  old.reset();
  if (!synced.ok()) {
    // Serves; after a restart its chunks are re-hashed (and fetched) through the old layout.
    Log(log::Warn("cache", synced.message()));
    return absl::OkStatus();
  }
  bool sealed;
  std::string local;
  {
    LayerLock lock(table_, *layer);
    sealed = layer->whole_verified && !layer->seal.empty();
    local = LocalIndexOf(*layer);
  }
  if (sealed) {
    // The seal now covers every file of the layer.
    const std::string seal = audit_.RecordSeal(layer, gen, synced, local);
    LayerLock lock(table_, *layer);
    if (layer->gen.load() == gen && !seal.empty()) layer->seal = seal;
  }
  return absl::OkStatus();
}

int LayerMembers::OpenVerifiedFile(const Digest& digest, uint64_t offset, uint64_t length) {
  std::shared_ptr<const LayerSegments> segments;
  const LayerSegments::File* member = nullptr;
  {
    TableLock lock(table_);
    std::shared_ptr<CacheLayer> layer = table_.Find(digest);
    if (!layer) return -1;
    LayerGuard held(*layer, Held(table_));
    if (!layer->has_spec || layer->refs.empty() || layer->quarantined) return -1;
    segments = layer->Segments();
    member = segments->FindMember(offset, length);
    if (member == nullptr) return -1;
    // Its own chunks verified and flushed are enough: nothing writes a verified chunk again, so
    // its file does not wait for the rest of the layer (a sealed layer's are all so).
    const uint64_t cs = layer->chunk_size;
    for (uint64_t c = member->offset / cs; c <= (member->offset + member->length - 1) / cs; ++c) {
      if (layer->state[c] != ChunkState::kVerified || !layer->durable[c]) return -1;
    }
    layer->last_used = table_.Stamp();
    layer->passthrough_opens++;
  }
  // A new read-only open file description of the very inode that was sealed (not of the path,
  // which a renewal may have replaced meanwhile): whoever holds it can never write the cache.
  return open(absl::StrCat("/proc/self/fd/", member->fd).c_str(), O_RDONLY | O_CLOEXEC);
}

}  // namespace modelfs
