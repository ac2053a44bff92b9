// LayerScrub (layer_scrub.h): the scrub, renewal of a layer found changed, fs-verity.
#include "core/cache/layer_scrub.h"

#include <fcntl.h>

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/base/background_priority.h"
#include "core/base/buffer_pool.h"
#include "core/cache/layer_members.h"
#include "core/cache/verifier.h"

namespace modelfs {

void LayerScrub::ProbeVerity() {
  // Said once, at open: whether the kernel could check the cache's pages itself.
  const absl::Status verity = verity_->Probe(options_.dir);
  fs_verity_ = verity.ok();
  Log(log::Info("cache", verity.ok() ? "fs-verity: supported by the cache's filesystem"
                                     : absl::StrCat("fs-verity: ", verity.message()))
          .Field("dir", options_.dir));
}

void LayerScrub::Start() {
  if (options_.scrub_interval > absl::ZeroDuration())
    thread_ = std::thread([this] { ScrubLoop(); });
}

void LayerScrub::Join() {
  if (thread_.joinable()) thread_.join();
}

bool LayerScrub::ScrubbingLocked(const CacheLayer& layer) const {
  TableGuard g(table_, Held(layer));
  return scrubbing_ == &layer;
}

void LayerScrub::ScrubLoop() {
  while (true) {
    {
      TableLock lock(table_);
      time_->AwaitWithDeadline(table_.mu(), table_.Closing(),
                               time_->Now() + options_.scrub_interval);
      if (table_.closing()) return;
    }
    ScrubOnce();
  }
}

int LayerScrub::ScrubOnce() {
  // Layers never audited first: a process that stopped before its audit left them unchecked
  // against their digest.
  std::vector<std::pair<std::shared_ptr<CacheLayer>, uint64_t>> todo;  // with the gen seen now
  {
    TableLock lock(table_);
    std::vector<std::pair<std::shared_ptr<CacheLayer>, uint64_t>> audited;
    for (const std::shared_ptr<CacheLayer>& layer : table_.Layers()) {
      LayerGuard held(*layer, Held(table_));
      if (!layer->whole_verified || layer->quarantined || layer->seal.empty()) continue;
      (layer->audited ? audited : todo).emplace_back(layer, layer->gen.load());
    }
    todo.insert(todo.end(), audited.begin(), audited.end());
  }
  int scrubbed = 0;
  std::vector<std::shared_ptr<CacheLayer>> passed;
  for (const auto& [layer, gen] : todo) {
    {
      LayerLock lock(table_, *layer);
      if (table_.closing()) break;
      // Evicted or quarantined since: not this pass's business.
      if (layer->gen.load() != gen || layer->quarantined) continue;
      layer->jobs++;  // keeps eviction (and its unlink) away while this layer is read
      scrubbing_ = layer.get();
    }
    if (ScrubLayer(layer) && fs_verity_) passed.push_back(layer);
    ++scrubbed;
    LayerLock lock(table_, *layer);
    layer->jobs--;
    scrubbing_ = nullptr;
  }
  todo.clear();  // ProtectScrubbed needs the last references to read-write fds gone
  ProtectScrubbed(std::move(passed));
  return scrubbed;
}

std::shared_ptr<CacheLayer> LayerScrub::ReadOnlyCopyLocked(
    const std::shared_ptr<CacheLayer>& layer) {
  if (table_.Find(layer->digest) != layer || layer->quarantined || !layer->whole_verified ||
      layer->seal.empty() || layer->jobs > 0 || !layer->in_memory.empty() || layer->moving) {
    return nullptr;
  }
  const int fd = store_.OpenReadOnly(layer->digest);
  if (fd < 0) return nullptr;
  std::shared_ptr<const LayerSegments> segments;
  if (layer->Segments()->has_members()) {
    // The same member files, over the read-only layer file.
    segments = layer->Segments()->Rebind(fcntl(fd, F_DUPFD_CLOEXEC, 0));
    if (!segments) {
      close(fd);
      return nullptr;
    }
  }
  auto copy = table_.NewLayer(layer->digest, layer->size, layer->chunk_size, fd);
  LayerGuard held(*copy, Held(table_));
  if (segments) copy->SetSegments(std::move(segments));
  copy->mode = layer->mode;
  copy->endpoint = layer->endpoint;
  copy->has_spec = layer->has_spec;
  copy->expected = layer->expected;
  copy->expected_algorithm = layer->expected_algorithm;
  copy->ResetChunks(ChunkState::kVerified);
  copy->served = layer->served;
  copy->durable = layer->durable;
  copy->dropped = layer->dropped;
  copy->refs = layer->refs;
  copy->whole_verified = true;
  copy->seal = layer->seal;
  copy->verity = layer->verity;
  copy->whole_verify_scheduled = layer->whole_verify_scheduled;
  copy->audited = layer->audited;
  copy->decoded = layer->decoded;
  copy->read_only = true;
  copy->last_used = layer->last_used;
  copy->cached_bytes = layer->cached_bytes;
  copy->run_start = layer->run_start;
  copy->run_end = layer->run_end;
  copy->window = layer->window;
  copy->scattered_bytes = layer->scattered_bytes;
  copy->read_front = layer->read_front;
  copy->bulk_next = layer->bulk_next;
  copy->stream_next = layer->stream_next;
  // The old entry is out of the table: its bytes are the copy's now (eviction and quarantine
  // count them there), its readers finish on its fd.
  layer->cached_bytes = 0;
  table_.Put(copy);
  return copy;
}

void LayerScrub::ProtectScrubbed(std::vector<std::shared_ptr<CacheLayer>> passed) {
  std::vector<std::shared_ptr<CacheLayer>> protect;
  {
    TableLock lock(table_);
    for (std::shared_ptr<CacheLayer>& layer : passed) {
      LayerGuard held(*layer, Held(table_));
      if (!layer->verity.empty() || layer->quarantined || layer->seal.empty() ||
          table_.Find(layer->digest) != layer) {
        continue;
      }
      if (layer->read_only) {
        protect.push_back(layer);
      } else if (std::shared_ptr<CacheLayer> copy = ReadOnlyCopyLocked(layer)) {
        protect.push_back(std::move(copy));
      }
    }
  }
  // The read-write entries are let go of here; one a reader still holds makes its file refuse
  // fs-verity (ETXTBSY) until a later pass.
  passed.clear();
  std::vector<std::shared_ptr<CacheLayer>> enabled;
  for (std::shared_ptr<CacheLayer>& layer : protect) {
    bool changed = false;
    // Builds each file's Merkle tree, reading all of it: at idle priority, as the scrub.
    RunAtBackgroundPriority([&] { changed = EnableVerityOnFiles(*layer); });
    if (changed) enabled.push_back(std::move(layer));
  }
  for (const std::shared_ptr<CacheLayer>& layer : enabled) {
    const std::string digest = MeasureFiles(*layer->Segments());
    const uint64_t gen = layer->gen.load();
    // Enabling changed the files' ctimes: the seal is taken again.
    const std::string seal = layer->Segments()->Seal();
    if (absl::Status r = journal_.RecordVerity(layer->digest.str(), seal, digest); !r.ok()) {
      Log(log::Warn("cache", r.message()));
      continue;
    }
    LayerLock lock(table_, *layer);
    if (layer->gen.load() != gen || layer->quarantined || layer->seal.empty()) continue;
    layer->seal = seal;
    layer->verity = digest;
  }
}

bool LayerScrub::ScrubLayer(const std::shared_ptr<CacheLayer>& layer) {
  const uint64_t gen = layer->gen.load();
  std::vector<ChunkHash> expected;
  ChunkDigestAlgorithm algorithm;
  std::vector<bool> drop_after;
  bool audited;
  {
    LayerLock lock(table_, *layer);
    if (layer->quarantined || !layer->whole_verified) return true;
    if (layer->expected.size() == layer->count()) expected = layer->expected;
    algorithm = layer->expected_algorithm;  // the chunk index's (BLAKE3 or SHA-256)
    if (options_.drop_served_pages) drop_after = layer->dropped;
    audited = layer->audited;
  }
  // Without chunk hashes (a chunk-mode layer sealed by an earlier process and not registered
  // again), or never audited: the whole file against the layer digest too.
  std::optional<Sha256> whole;
  if (!audited || expected.empty()) whole.emplace();
  absl::Status found;  // the first mismatch or read error
  // Its bytes [first, last]: the chunk, or the whole layer for a whole-file mismatch.
  std::pair<uint64_t, uint64_t> bad(0, layer->size == 0 ? 0 : layer->size - 1);
  bool aborted = false;
  const std::shared_ptr<const LayerSegments> segments = layer->Segments();
  RunAtBackgroundPriority([&] {
    BufferPool::Buffer buf =
        BufferPool::Shared().Get(std::min(layer->chunk_size, std::max<uint64_t>(layer->size, 1)));
    const absl::Time start = time_->Now();
    uint64_t read = 0;
    for (uint64_t c = 0; c < layer->count(); ++c) {
      const uint64_t off = c * layer->chunk_size;
      const uint64_t len = layer->ChunkLen(c);
      if (layer->gen.load() != gen) {
        aborted = true;  // quarantined or evicted meanwhile
        return;
      }
      bad = {off, off + len - 1};
      found = segments->ReadFull(store_, layer->digest, buf.data(), len, off);
      if (!found.ok()) return;
      const absl::string_view bytes(buf.data(), len);
      if (!expected.empty()) {
        found =
            CheckChunkHash(HashChunkBytes(algorithm, std::string_view(bytes.data(), bytes.size())),
                           expected[c], layer->digest, c, off, len);
        if (!found.ok()) return;
      }
      if (whole) whole->Update(bytes.data(), bytes.size());
      if (c < drop_after.size() && drop_after[c]) {
        // It was not in the page cache before the scrub: leave it out again.
        segments->Advise(off, off + len, POSIX_FADV_DONTNEED);
      }
      read += len;
      counters_.scrubbed_bytes += len;
      // Never ahead of scrub_rate; the wait ends early when the cache closes.
      const absl::Time due =
          start + absl::Seconds(static_cast<double>(read) /
                                static_cast<double>(std::max<uint64_t>(options_.scrub_rate, 1)));
      TableLock lock(table_);
      if (time_->Now() < due) time_->AwaitWithDeadline(table_.mu(), table_.Closing(), due);
      if (table_.closing()) {
        aborted = true;
        return;
      }
    }
  });
  if (aborted) return true;
  if (found.ok() && whole) {
    const Digest got = whole->Finish();
    if (got != layer->digest) {
      bad = {0, layer->size == 0 ? 0 : layer->size - 1};
      found = absl::DataLossError(absl::StrCat("layer ", layer->digest.str(), " (bytes [0, ",
                                               layer->size, ")) hashes to ", got.str()));
      if (!expected.empty()) {
        // Every chunk matched the chunk index, the whole file not the layer digest: the index
        // disagrees with its layer, and the same bytes fetched again would too.
        if (layer->gen.load() != gen) return true;
        counters_.verification_failures++;
        audit_.Quarantine(layer,
                          absl::StrCat("the scrub's audit: its chunks match the chunk index, "
                                       "the layer digest does not: ",
                                       found.message()));
        return false;
      }
    }
  }
  if (!found.ok()) {
    if (layer->gen.load() != gen) return true;
    counters_.scrub_failures++;
    counters_.verification_failures++;
    // No new open gets passthrough or a byte of it from here on, and its chunks are fetched
    // and verified again (docs/cache-format.md says what becomes of a passthrough fd already
    // open).
    OnScrubFinding(layer, gen, found.message(), bad);
    return false;
  }
  if (!audited) {
    {
      LayerLock lock(table_, *layer);
      if (layer->gen.load() != gen || layer->quarantined || layer->mode != VerifyMode::kChunk) {
        return true;
      }
      layer->audited = true;
    }
    counters_.audited_layers++;
    audit_.RecordAudited(layer);
  }
  return true;
}

std::string LayerScrub::MeasureFiles(const LayerSegments& files) const {
  absl::StatusOr<std::string> layer = verity_->Measure(files.layer_fd());
  std::string out = layer.ok() ? *layer : std::string();
  for (const LayerSegments::File& m : files.members()) {
    absl::StatusOr<std::string> member = verity_->Measure(m.fd);
    absl::StrAppend(&out, ";", m.offset, "=", member.ok() ? *member : std::string());
  }
  return out;
}

bool LayerScrub::EnableVerityOnFiles(const CacheLayer& layer) {
  bool changed = false;
  auto enable = [&](const std::string& path, absl::string_view what) {
    absl::Status s = verity_->Enable(path);
    if (s.ok()) {
      changed = true;
    } else if (!absl::IsFailedPrecondition(s)) {
      Log(log::Warn("cache", absl::StrCat("fs-verity not enabled on its ", what, ": ", s.message()))
              .Field("digest", layer.digest.str()));
    }
  };
  for (const LayerSegments::File& m : layer.Segments()->members()) {
    enable(store_.MemberPathOf(layer.digest, m.offset), absl::StrCat("member file ", m.offset));
  }
  enable(store_.PathOf(layer.digest), "data file");
  return changed;
}

bool LayerScrub::VerityHolds(const Digest& digest, const LayerSegments& files,
                             const std::string& recorded) const {
  if (recorded.empty()) return true;
  if (!files.has_members()) {
    absl::StatusOr<std::string> now = verity_->Measure(files.layer_fd());
    if (now.ok() && *now == recorded) return true;
    Log(log::Error("cache",
                   "sealed data file's fs-verity digest differs from its seal: not "
                   "trusted, its chunks are verified again before they are served")
            .Field("digest", digest.str())
            .Field("reason",
                   now.ok() ? absl::StrCat("fs-verity digest ", *now, ", recorded ", recorded)
                            : absl::StrCat("lost its fs-verity (", now.status().message(), ")")));
    return false;
  }
  const std::string now = MeasureFiles(files);
  if (now == recorded) return true;
  Log(log::Error("cache",
                 "sealed files' fs-verity digests differ from their seal: not trusted, "
                 "its chunks are verified again before they are served")
          .Field("digest", digest.str())
          .Field("reason",
                 absl::StrCat("fs-verity digests '", now, "', recorded '", recorded, "'")));
  return false;
}

void LayerScrub::ProtectSealed(const std::vector<std::shared_ptr<CacheLayer>>& layers) {
  for (const std::shared_ptr<CacheLayer>& layer : layers) {
    // Reads the whole files to build their Merkle trees: not under the lock.
    if (!EnableVerityOnFiles(*layer)) continue;
    const std::string digest = MeasureFiles(*layer->Segments());
    // Enabling changed the files' ctimes: the seal is taken again.
    const std::string seal = layer->Segments()->Seal();
    if (absl::Status r = journal_.RecordVerity(layer->digest.str(), seal, digest); !r.ok()) {
      Log(log::Warn("cache", r.message()));
      continue;
    }
    LayerLock lock(table_, *layer);
    layer->seal = seal;
    layer->verity = digest;
  }
}

void LayerScrub::OnScrubFinding(const std::shared_ptr<CacheLayer>& layer, uint64_t gen,
                                absl::string_view what, std::pair<uint64_t, uint64_t> bad) {
  LayerLock lock(table_, *layer);
  if (layer->gen.load() != gen || layer->quarantined || table_.Find(layer->digest) != layer) return;
  if (layer->has_spec && !layer->decoded) {
    RenewLayerLocked(layer, what, bad);
    return;
  }
  // Nothing to fetch it from (a decoded layer), or no model registered it in this process:
  // dropped, so that the next registration or decode starts it over.
  audit_.WipeLocked(*layer);
  table_.Erase(layer->digest);
  journal_.Forget(layer->digest.str());
  store_.Remove(layer->digest);
  Log(log::Error("cache", absl::StrCat("the scrub found the layer changed on disk; dropped from "
                                       "the cache (",
                                       layer->decoded ? "a decoded layer, decoded again"
                                                      : "registered again",
                                       " when a model needs it)"))
          .Field("digest", layer->digest.str())
          .Range(bad.first, bad.second)
          .Field("registry", layer->endpoint)
          .Field("reason", what));
}

void LayerScrub::RenewLayerLocked(const std::shared_ptr<CacheLayer>& old, absl::string_view what,
                                  std::pair<uint64_t, uint64_t> bad) {
  // At once, before any file operation: no open gets passthrough, no read a byte of it.
  audit_.WipeLocked(*old);
  old->renewed = true;
  journal_.Forget(old->digest.str());
  // The changed inode is unlinked, not rewritten: fds already open on it (passthrough opens,
  // spans of reads under way) keep the old bytes, and nothing new ever reads them.
  store_.Remove(old->digest);
  absl::StatusOr<int> fd = store_.Create(old->digest, old->size, /*truncate=*/true);
  if (!fd.ok()) {
    table_.Erase(old->digest);
    Log(log::Error("cache",
                   absl::StrCat("the scrub found the layer changed on disk; no new data "
                                "file for it (",
                                fd.status().message(), "): dropped until registered again"))
            .Field("digest", old->digest.str())
            .Range(bad.first, bad.second)
            .Field("registry", old->endpoint)
            .Field("reason", what));
    return;
  }
  auto fresh = table_.NewLayer(old->digest, old->size, old->chunk_size, *fd);
  LayerGuard held(*fresh, Held(table_));
  // Its files get new, empty member files too (the changed ones went with store_.Remove).
  const std::vector<LayerMember> layout = old->Segments()->layout();
  if (!layout.empty()) {
    absl::StatusOr<std::shared_ptr<LayerSegments>> members = OpenMemberFiles(
        store_, old->digest, fcntl(*fd, F_DUPFD_CLOEXEC, 0), layout, /*create=*/true,
        /*read_only=*/false);
    if (members.ok()) {
      fresh->SetSegments(*std::move(members));
    } else {
      Log(log::Warn("cache", absl::StrCat("its files stay in its new data file: ",
                                          members.status().message()))
              .Field("digest", old->digest.str()));
    }
  }
  fresh->mode = old->mode;
  fresh->ResetChunks(ChunkState::kMissing);
  if (old->mode == VerifyMode::kChunk) {
    // The chunk index, which chains to the pinned manifest. (A whole-layer mode layer's local
    // index came from the changed file's first verification; it is computed again.)
    fresh->expected = old->expected;
    fresh->expected_algorithm = old->expected_algorithm;
    // The audit said the chunk index agrees with the layer digest: the same chunks will.
    fresh->audited = old->audited;
  }
  fresh->has_spec = true;
  fresh->endpoint = old->endpoint;
  fresh->refs = old->refs;
  fresh->last_used = old->last_used;
  if (absl::Status s = journal_.UpsertLayer(RecordOf(*fresh, false, "", "")); !s.ok()) {
    Log(log::Warn("cache", s.message()));  // serves; only not remembered across a restart
  }
  if (fresh->Segments()->has_members()) {
    std::vector<std::pair<uint64_t, uint64_t>> rows;
    for (const LayerMember& m : layout) rows.emplace_back(m.offset, m.length);
    if (absl::Status s = journal_.RecordMembers(fresh->digest.str(), rows); !s.ok()) {
      Log(log::Warn("cache", s.message()));
    }
  }
  table_.Put(fresh);
  counters_.scrub_repairs++;
  Log(log::Error("cache",
                 "the scrub found the layer changed on disk; it is out of service and "
                 "fetched again into a new data file, each chunk verified (passthrough "
                 "opens made before this keep the changed file)")
          .Field("digest", old->digest.str())
          .Range(bad.first, bad.second)
          .Field("registry", fresh->endpoint)
          .Field("reason", what));
  // Refetched now, not only when read, so that passthrough comes back (the seal) without
  // waiting for a reader of every chunk.
  if (fresh->count() > 0) refetch_.RefetchLocked(fresh);
}

}  // namespace modelfs
