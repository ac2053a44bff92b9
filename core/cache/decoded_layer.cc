// DecodedLayers (decoded_layer.h): a compressed tar layer served as the layer of its
// decompressed bytes, keyed by their digest, with its own data file, verified and sealed before
// it is registered (docs/cache-format.md, "Decoded layers").
#include "core/cache/decoded_layer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <filesystem>
#include <limits>
#include <optional>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "core/base/backoff.h"
#include "core/cache/tar_split_writer.h"
#include "core/cache/verifier.h"
#include "core/oci/modelpack.h"
#include "core/oci/tar.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

// Bytes go from one stage of a decode to the next in pieces of this size.
constexpr uint64_t kPieceBytes = 4ull << 20;
// A stream asks for this much per request: each request has the read deadline of its own, so a
// slow link fails nothing that makes progress.
constexpr uint64_t kStreamRequestBytes = 256ull << 20;
// Pieces queued ahead of the next stage at most (its memory: this many times kPieceBytes).
constexpr size_t kPiecesAhead = 8;

// Pieces of bytes from one thread to another, in order, at most kPiecesAhead queued; the
// buffers go round (a taker hands its last one back), so no piece faults in fresh memory.
class PieceQueue {
 public:
  // Queues `*piece` (waiting while the queue is full) and leaves a buffer to fill in its place.
  // Errors: kCancelled once the taker stopped.
  absl::Status Put(std::string* piece) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](PieceQueue* q) ABSL_SHARED_LOCKS_REQUIRED(q->mu_) {
          return q->cancelled_ || q->ready_.size() < kPiecesAhead;
        },
        this));
    if (cancelled_) return absl::CancelledError("the next stage stopped");
    ready_.push_back(std::move(*piece));
    if (spare_.empty()) {
      *piece = std::string();
      piece->reserve(kPieceBytes);
    } else {
      *piece = std::move(spare_.back());
      spare_.pop_back();
    }
    piece->clear();
    return absl::OkStatus();
  }
  // Appends `bytes` to `*piece`, queueing it (Put) each time it reaches kPieceBytes.
  absl::Status Append(std::string* piece, std::string_view bytes) {
    while (!bytes.empty()) {
      const size_t n = std::min<uint64_t>(bytes.size(), kPieceBytes - piece->size());
      piece->append(bytes.data(), n);
      bytes.remove_prefix(n);
      if (piece->size() == kPieceBytes) RETURN_IF_ERROR(Put(piece));
    }
    return absl::OkStatus();
  }
  // No more pieces: Take reports `status` after the last one.
  void Close(absl::Status status) {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    status_ = std::move(status);
  }
  // The taker stops: Put fails from now on.
  void Cancel() {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }
  bool cancelled() const {
    absl::MutexLock lock(&mu_);
    return cancelled_;
  }
  // Sets `*piece` to the next piece (the buffer it held goes round); empty after the last one,
  // with the status Close gave.
  absl::Status Take(std::string* piece) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](PieceQueue* q)
             ABSL_SHARED_LOCKS_REQUIRED(q->mu_) { return q->closed_ || !q->ready_.empty(); },
        this));
    if (piece->capacity() >= kPieceBytes) spare_.push_back(std::move(*piece));
    if (!ready_.empty()) {
      *piece = std::move(ready_.front());
      ready_.pop_front();
      return absl::OkStatus();
    }
    *piece = std::string();
    return status_;
  }

 private:
  mutable absl::Mutex mu_;
  std::deque<std::string> ready_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> spare_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

// The compressed bytes of a layer, fetched from the remote by a thread of their own and handed
// to the decoder as they arrive, so that the download and the decode overlap and the
// compressed bytes never touch the disk. Their SHA-256 is checked against the layer digest
// before the end of the stream is reported: the decoder reaches the end (and DecodeLayer its
// OK) only when every compressed byte was right. A transient error resumes at the byte
// reached, for as long as the stream makes progress within the read deadline.
class DecodedLayers::CompressedStream {
 public:
  CompressedStream(DecodedLayers& cache, const DecodedLayerSpec& spec)
      : cache_(cache), spec_(spec), thread_([this] { queue_.Close(Fetch()); }) {}
  // Stops the fetch (at its next piece, or the request's deadline) and waits for it.
  ~CompressedStream() {
    queue_.Cancel();
    thread_.join();
  }

  // Sets `*piece` to the next compressed bytes; empty at the end, once the digest matched.
  // Errors: the fetch's; kDataLoss when the bytes do not hash to the layer digest.
  absl::Status Next(std::string* piece) { return queue_.Take(piece); }

 private:
  absl::Status Fetch() {
    const std::string name = absl::StrCat("layer ", spec_.source.str());
    const uint64_t size = spec_.source_size;
    Sha256 hash;
    std::string buffer;
    buffer.reserve(kPieceBytes);
    uint64_t offset = 0;
    absl::Time progress_at = cache_.time_->Now();
    absl::Duration step = absl::Milliseconds(20);
    while (offset < size) {
      const uint64_t begin = offset;
      const uint64_t length = std::min(kStreamRequestBytes, size - offset);
      cache_.counters_.requests++;
      absl::Status st = cache_.remote_->StreamRange(
          spec_.source, offset, length, cache_.time_->Now() + cache_.options_.read_deadline,
          [&](absl::string_view data) -> absl::Status {
            cache_.counters_.bytes_fetched += data.size();
            if (data.size() > begin + length - offset) {
              return absl::InternalError(absl::StrCat(name, ": the remote sent more than bytes [",
                                                      begin, ", ", begin + length, ")"));
            }
            hash.Update(data.data(), data.size());
            offset += data.size();
            return queue_.Append(&buffer, std::string_view(data.data(), data.size()));
          });
      if (st.ok() && offset == begin + length) continue;
      if (absl::IsCancelled(st)) return st;
      if (st.ok()) {
        st = absl::UnavailableError(absl::StrCat(name, ": the stream ended at byte ", offset,
                                                 " of [", begin, ", ", begin + length, ")"));
      }
      if (!RetryableCode(st.code())) return st;
      const absl::Time now = cache_.time_->Now();
      if (offset > begin) {
        progress_at = now;
        step = absl::Milliseconds(20);
      } else if (now - progress_at >= cache_.options_.read_deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            name, ": its fetch made no progress at byte ", offset, " within ",
            absl::FormatDuration(cache_.options_.read_deadline), "; last error: ", st.message()));
      }
      // A decode that stopped (corrupt bytes, a closing cache) ends the retries at once,
      // rather than at the read deadline, for the destructor waits for this thread.
      if (queue_.cancelled()) return absl::CancelledError("the decode stopped");
      cache_.time_->SleepFor(step);
      step = std::min(step * 2, absl::Seconds(2));
    }
    if (!buffer.empty()) RETURN_IF_ERROR(queue_.Put(&buffer));
    const Digest got = hash.Finish();
    if (got != spec_.source) {
      return absl::DataLossError(absl::StrCat(name, ": its compressed bytes have digest ",
                                              got.str(), ", ", size,
                                              " bytes fetched; nothing of it was installed"));
    }
    return absl::OkStatus();
  }

  DecodedLayers& cache_;
  const DecodedLayerSpec spec_;
  PieceQueue queue_;
  std::thread thread_;  // last: starts once the rest is built
};

std::optional<uint64_t> DecodedLayers::ReuseDecoded(const Digest& digest,
                                                    const std::string& model_ref) {
  uint64_t size = 0;
  {
    TableLock lock(table_);
    std::shared_ptr<CacheLayer> layer = table_.Find(digest);
    if (!layer) return std::nullopt;
    LayerGuard held(*layer, Held(table_));
    if (layer->quarantined) return std::nullopt;
    // Registered in this process (the same bytes as another model's .tar layer, or a decode
    // done earlier): it serves verified bytes in its own mode. Known from an earlier process:
    // only whole, verified and with its seal intact, the state a decode leaves it in.
    const bool sealed_whole =
        layer->whole_verified && !layer->seal.empty() && layer->mode == VerifyMode::kWholeLayer &&
        layer->chunk_size == options_.whole_chunk_size && layer->expected.size() == layer->count();
    if (!layer->has_spec && !sealed_whole) return std::nullopt;
    size = layer->size;
  }
  LayerSpec spec;
  spec.digest = digest;
  spec.size = size;
  spec.mode = VerifyMode::kWholeLayer;
  spec.model_ref = model_ref;
  if (!register_layer_(spec).ok()) return std::nullopt;
  TableLock lock(table_);
  if (std::shared_ptr<CacheLayer> layer = table_.Find(digest)) {
    LayerGuard held(*layer, Held(table_));
    layer->decoded = true;  // a scrub finding drops it instead of fetching it
  }
  return size;
}

absl::StatusOr<DecodedLayer> DecodedLayers::Register(const DecodedLayerSpec& spec) {
  if (spec.model_ref.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache: layer ", spec.source.str(), " registered without a model_ref"));
  }
  // One decode per source at a time; a second caller then finds the first one's result.
  {
    TableLock lock(table_);
    auto idle = [&]() ABSL_SHARED_LOCKS_REQUIRED(table_.mu()) {
      return table_.closing() || !decoding_.contains(spec.source);
    };
    table_.mu().Await(absl::Condition(&idle));
    if (table_.closing()) return absl::CancelledError("cache: closing");
    decoding_.insert(spec.source);
  }
  absl::Cleanup done = [&] {
    TableLock lock(table_);
    decoding_.erase(spec.source);
  };
  std::optional<Digest> known = spec.diff_id;
  if (!known) {
    absl::StatusOr<Digest> recorded = Digest::Parse(journal_.DecodedOf(spec.source.str()));
    if (recorded.ok()) known = *recorded;
  }
  if (known) {
    if (std::optional<uint64_t> size = ReuseDecoded(*known, spec.model_ref)) {
      return DecodedLayer{*known, *size};
    }
  }
  return DecodeAndInstall(spec);
}

absl::StatusOr<DecodedLayer> DecodedLayers::DecodeAndInstall(const DecodedLayerSpec& spec) {
  const std::string name = absl::StrCat("layer ", spec.source.str());
  // 1. The compressed bytes: streamed from the remote into the decoder as they arrive, and
  // checked against the layer digest when the last one is in (CompressedStream). Nothing
  // decoded is installed before both that check and DecodeLayer's diffId check pass. A
  // compressed copy this cache holds already, whole and verified, is read instead.
  std::shared_ptr<CacheLayer> local;
  {
    TableLock lock(table_);
    if (std::shared_ptr<CacheLayer> l = table_.Find(spec.source)) {
      LayerGuard held(*l, Held(table_));
      if (l->whole_verified && !l->quarantined && l->size == spec.source_size) local = l;
    }
  }
  std::unique_ptr<CompressedStream> stream;
  CompressedReader read;
  if (local) {
    read = [&](uint64_t offset, std::string* piece) -> absl::Status {
      const uint64_t n = std::min(kPieceBytes, local->size - offset);
      piece->resize(n);
      if (n == 0) return absl::OkStatus();
      return local->Segments()->ReadFull(store_, spec.source, piece->data(), n, offset);
    };
  } else {
    stream = std::make_unique<CompressedStream>(*this, spec);
    read = [&](uint64_t, std::string* piece) { return stream->Next(piece); };
  }

  // 2. Decoded into a file of its own, named for the source until its digest is known. A
  // crash leaves it behind; Open removes it (no journal row names it).
  const std::string tmp = absl::StrCat(store_.PathOf(spec.source), ".decoding");
  const int out = open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (out < 0) return absl::InternalError(absl::StrCat(tmp, ": ", strerror(errno)));
  bool installed = false;
  absl::Cleanup remove_tmp = [&] {
    close(out);
    if (!installed) unlink(tmp.c_str());
  };
  // The local index (a SHA-256 per whole_chunk_size chunk, what later re-checks use), hashed
  // from the bytes as they are written: with the diffId check of DecodeLayer, it is the
  // whole-layer check of the file, which is then not read again. A thread of its own writes
  // and hashes while the decoder (which hashes the diffId) goes on.
  PieceQueue to_write;
  LayerFileHash hashed;
  absl::Status write_status;
  // Its larger files go to member files of their own as they are written (TarSplitWriter),
  // so that each can be served by passthrough once the layer is verified.
  const std::string tmp_members = absl::StrCat(tmp, ".members");
  TarSplitWriter split(store_, out, tmp, tmp_members, options_.member_min_bytes,
                       absl::StrCat(name, ": no space in cache directory ", options_.dir,
                                    " for its decompressed bytes"));
  std::vector<LayerSegments::File> members;
  absl::Cleanup drop_members = [&] {
    for (const LayerSegments::File& m : members) close(m.fd);
    std::error_code ec;
    std::filesystem::remove_all(tmp_members, ec);
  };
  std::thread writer([&] {
    const uint64_t cs = options_.whole_chunk_size;
    Sha256 chunk_hash;
    uint64_t in_chunk = 0;
    std::string piece;
    absl::Status st;
    while ((st = to_write.Take(&piece)).ok() && !piece.empty()) {
      if (st = split.Write(piece); !st.ok()) break;
      for (std::string_view rest = piece; !rest.empty();) {
        const size_t n = std::min<uint64_t>(rest.size(), cs - in_chunk);
        chunk_hash.Update(rest.substr(0, n));
        rest.remove_prefix(n);
        if ((in_chunk += n) == cs) {
          hashed.local_index.append(reinterpret_cast<const char*>(chunk_hash.Finish().raw().data()),
                                    32);
          chunk_hash = Sha256();
          in_chunk = 0;
        }
      }
    }
    if (st.ok() && in_chunk > 0) {
      hashed.local_index.append(reinterpret_cast<const char*>(chunk_hash.Finish().raw().data()),
                                32);
    }
    if (st.ok()) {
      absl::StatusOr<std::vector<LayerSegments::File>> files = split.Finish();
      if (files.ok()) {
        members = *std::move(files);
      } else {
        st = files.status();
      }
    }
    if (!st.ok()) to_write.Cancel();
    write_status = std::move(st);
  });
  std::string piece;
  piece.reserve(kPieceBytes);
  uint64_t produced = 0;
  absl::StatusOr<DecodedLayer> decoded = DecodeLayer(
      spec.encoding, spec.source, spec.diff_id, read, [&](std::string_view bytes) -> absl::Status {
        // A layer that decompresses past the largest layer accepted is refused as it grows.
        if ((produced += bytes.size()) > kMaxModelLayerBytes) {
          return absl::InvalidArgumentError(absl::StrCat(
              name, " decompresses to more than the limit of ", kMaxModelLayerBytes, " bytes"));
        }
        return to_write.Append(&piece, bytes);
      });
  if (decoded.ok() && !piece.empty()) {
    if (absl::Status s = to_write.Put(&piece); !s.ok()) decoded = s;
  }
  to_write.Close(decoded.ok() ? absl::OkStatus() : absl::CancelledError("the decode failed"));
  writer.join();
  if (!write_status.ok() && (decoded.ok() || absl::IsCancelled(decoded.status()))) {
    decoded = write_status;
  }
  if (!decoded.ok()) {
    if (absl::IsDataLoss(decoded.status())) {
      counters_.verification_failures++;
      Log(log::Error("cache", "decoded layer failed verification")
              .Field("digest", spec.source.str())
              .Field("reason", decoded.status().message()));
    }
    return decoded.status();
  }

  // 3. Installed under its digest, unless the same bytes are here already.
  if (std::optional<uint64_t> size = ReuseDecoded(decoded->digest, spec.model_ref)) {
    journal_.RecordDecoded(spec.source.str(), decoded->digest.str()).IgnoreError();
    return DecodedLayer{decoded->digest, *size};
  }
  std::shared_ptr<CacheLayer> layer;
  {
    TableLock lock(table_);
    if (std::shared_ptr<CacheLayer> old = table_.Find(decoded->digest)) {
      LayerGuard held(*old, Held(table_));
      if (old->has_spec || old->pins > 0 || old->jobs > 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            name, ": its decompressed layer ", decoded->digest.str(), " is in use and unusable"));
      }
      // A partial or unsealed copy from an earlier process: replaced.
      table_.Unlink(*old);
      journal_.Forget(decoded->digest.str());
    }
    if (rename(tmp.c_str(), store_.PathOf(decoded->digest).c_str()) != 0) {
      return absl::InternalError(absl::StrCat(tmp, ": rename: ", strerror(errno)));
    }
    installed = true;
    const int fd = store_.OpenExisting(decoded->digest);
    if (fd < 0) {
      store_.Remove(decoded->digest);
      return absl::InternalError(
          absl::StrCat(store_.PathOf(decoded->digest), ": cannot reopen: ", strerror(errno)));
    }
    layer = table_.NewLayer(decoded->digest, decoded->size, options_.whole_chunk_size, fd);
    if (!members.empty()) {
      // The split files go under the decoded digest (those of a copy replaced above go first).
      store_.RemoveMembers(decoded->digest);
      const std::string dir = absl::StrCat(options_.dir, "/blobs/sha256/",
                                           LayerStore::MemberDirNameOf(decoded->digest));
      if (rename(tmp_members.c_str(), dir.c_str()) != 0) {
        // Served from the open files all the same; a restart decodes it again.
        Log(log::Warn("cache", absl::StrCat(tmp_members, ": rename: ", strerror(errno))));
      }
      std::vector<std::pair<uint64_t, uint64_t>> rows;
      for (const LayerSegments::File& m : members) rows.emplace_back(m.offset, m.length);
      layer->SetSegments(
          std::make_shared<const LayerSegments>(fcntl(fd, F_DUPFD_CLOEXEC, 0), std::move(members)));
      members.clear();
      if (absl::Status s = journal_.RecordMembers(decoded->digest.str(), rows); !s.ok()) {
        Log(log::Warn("cache", s.message()));
      }
    }
    LayerGuard held(*layer, Held(table_));
    layer->mode = VerifyMode::kWholeLayer;
    layer->has_spec = true;
    layer->decoded = true;
    layer->refs.insert(spec.model_ref);
    layer->last_used = table_.Stamp();
    // Present, not verified: nothing is served before RunWholeVerify below marks it.
    layer->ResetChunks(ChunkState::kPresent);
    table_.AddLayerBytes(*layer, layer->size);
    layer->whole_verify_scheduled = true;
    layer->jobs++;
    if (absl::Status s = journal_.UpsertLayer(RecordOf(*layer, false, "", "")); !s.ok()) {
      Log(log::Warn("cache", s.message()));
    }
    table_.Put(layer);
  }
  // The whole-layer check of the file as written (it also computes the local index later
  // re-checks use), then the flush, the records and the seal. A mismatch quarantines it.
  hashed.digest = decoded->digest;
  audit_.RunWholeVerify(layer, VerifyMode::kWholeLayer, &hashed);
  {
    LayerLock lock(table_, *layer);
    if (!layer->whole_verified || layer->quarantined) {
      return absl::DataLossError(absl::StrCat(name, ": its decompressed layer ",
                                              decoded->digest.str(),
                                              " failed verification as written to the cache"));
    }
  }
  if (absl::Status s = journal_.RecordDecoded(spec.source.str(), decoded->digest.str()); !s.ok()) {
    Log(log::Warn("cache",
                  s.message()));  // only costs a decode after a restart when M has no diffIds
  }
  return DecodedLayer{decoded->digest, decoded->size};
}

}  // namespace modelfs
