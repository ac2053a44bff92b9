// BlobCache's decoded layers: a compressed tar layer served as the layer of its decompressed
// bytes, keyed by their digest, with its own data file, verified and sealed before it is
// registered (docs/cache-format.md, "Decoded layers").
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "core/cache/blob_cache.h"
#include "core/cache/verifier.h"
#include "core/oci/modelpack.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

// The compressed layer is read from its verified data file in pieces of this size.
constexpr uint64_t kDecodeReadBytes = 4ull << 20;

}  // namespace

std::optional<uint64_t> BlobCache::ReuseDecoded(const Digest& digest,
                                                const std::string& model_ref) {
  uint64_t size = 0;
  {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<Layer> layer = FindLocked(digest);
    if (!layer) return std::nullopt;
    LayerGuard held(*layer, Held(mu_));
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
  if (!RegisterLayer(spec).ok()) return std::nullopt;
  absl::MutexLock lock(&mu_);
  if (std::shared_ptr<Layer> layer = FindLocked(digest)) {
    LayerGuard held(*layer, Held(mu_));
    layer->decoded = true;  // a scrub finding drops it instead of fetching it
  }
  return size;
}

absl::StatusOr<DecodedLayer> BlobCache::RegisterDecodedLayer(const DecodedLayerSpec& spec) {
  if (spec.model_ref.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache: layer ", spec.source.str(), " registered without a model_ref"));
  }
  // One decode per source at a time; a second caller then finds the first one's result.
  {
    absl::MutexLock lock(&mu_);
    auto idle = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return stopping_ || !decoding_.contains(spec.source);
    };
    mu_.Await(absl::Condition(&idle));
    if (stopping_) return absl::CancelledError("cache: closing");
    decoding_.insert(spec.source);
  }
  absl::Cleanup done = [&] {
    absl::MutexLock lock(&mu_);
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

absl::StatusOr<DecodedLayer> BlobCache::DecodeAndInstall(const DecodedLayerSpec& spec) {
  const std::string name = absl::StrCat("layer ", spec.source.str());
  // 1. The compressed layer, fetched whole and checked against its digest before a byte of it
  // is decoded. The wait goes on for as long as the fill makes progress.
  LayerSpec source;
  source.digest = spec.source;
  source.size = spec.source_size;
  source.mode = VerifyMode::kWholeLayer;
  source.model_ref = spec.model_ref;
  RETURN_IF_ERROR(RegisterLayer(source));
  std::shared_ptr<Layer> compressed;
  {
    absl::MutexLock lock(&mu_);
    compressed = FindRegisteredLocked(spec.source);
  }
  if (!compressed) return NotRegistered(spec.source);
  uint64_t progress = 0;
  while (true) {
    absl::Status s = EnsureWholeLayer(compressed, time_->Now() + options_.read_deadline);
    if (s.ok()) break;
    if (!absl::IsDeadlineExceeded(s)) return s;
    absl::MutexLock lock(&mu_);
    LayerGuard held(*compressed, Held(mu_));
    uint64_t landed = 0;
    for (uint64_t c = 0; c < compressed->count(); ++c) {
      if (compressed->state[c] != ChunkState::kMissing &&
          compressed->state[c] != ChunkState::kInFlight) {
        landed++;
      }
    }
    // Every chunk here: the whole-layer hash is running, local work that ends.
    if (landed <= progress && landed < compressed->count()) {
      return absl::DeadlineExceededError(
          absl::StrCat(name, ": the compressed layer's fetch made no progress within ",
                       absl::FormatDuration(options_.read_deadline)));
    }
    progress = landed;
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
  uint64_t written = 0;
  // The local index (a SHA-256 per whole_chunk_size chunk, what later re-checks use), hashed
  // from the bytes as they are written: with the diffId check of DecodeLayer, it is the
  // whole-layer check of the file, which is then not read again.
  const uint64_t cs = options_.whole_chunk_size;
  LayerFileHash hashed;
  Sha256 chunk_hash;
  uint64_t in_chunk = 0;
  absl::StatusOr<DecodedLayer> decoded = DecodeLayer(
      spec.encoding, spec.source, spec.diff_id,
      [&](uint64_t offset, std::string* piece) -> absl::Status {
        const uint64_t n = std::min(kDecodeReadBytes, compressed->size - offset);
        piece->resize(n);
        if (n == 0) return absl::OkStatus();
        return compressed->Segments()->ReadFull(store_, spec.source, piece->data(), n, offset);
      },
      [&](std::string_view bytes) -> absl::Status {
        // A layer that decompresses past the largest layer accepted is refused as it grows.
        if (written + bytes.size() > kMaxModelLayerBytes) {
          return absl::InvalidArgumentError(absl::StrCat(
              name, " decompresses to more than the limit of ", kMaxModelLayerBytes, " bytes"));
        }
        const int err = store_.Write(out, bytes.data(), bytes.size(), written);
        if (err == ENOSPC || err == EDQUOT) {
          return absl::ResourceExhaustedError(absl::StrCat(
              name, ": no space in cache directory ", options_.dir, " for its decompressed bytes"));
        }
        if (err != 0) {
          return absl::InternalError(
              absl::StrCat(tmp, ": write at offset ", written, ": ", strerror(err)));
        }
        written += bytes.size();
        for (std::string_view rest = bytes; !rest.empty();) {
          const size_t n = std::min<uint64_t>(rest.size(), cs - in_chunk);
          chunk_hash.Update(rest.substr(0, n));
          rest.remove_prefix(n);
          if ((in_chunk += n) == cs) {
            hashed.local_index.append(
                reinterpret_cast<const char*>(chunk_hash.Finish().raw().data()), 32);
            chunk_hash = Sha256();
            in_chunk = 0;
          }
        }
        return absl::OkStatus();
      });
  if (decoded.ok() && in_chunk > 0) {
    hashed.local_index.append(reinterpret_cast<const char*>(chunk_hash.Finish().raw().data()), 32);
  }
  if (!decoded.ok()) {
    if (absl::IsDataLoss(decoded.status())) {
      counters_.verification_failures++;
      Log(decoded.status().message());
    }
    return decoded.status();
  }

  // 3. Installed under its digest, unless the same bytes are here already.
  if (std::optional<uint64_t> size = ReuseDecoded(decoded->digest, spec.model_ref)) {
    journal_.RecordDecoded(spec.source.str(), decoded->digest.str()).IgnoreError();
    UnregisterLayer(spec.source, spec.model_ref);
    return DecodedLayer{decoded->digest, *size};
  }
  // 2b. Its larger files apart (layer_segments.h), while nothing reads it, so that each can be
  // served by passthrough once the layer is verified.
  const std::string tmp_members = absl::StrCat(tmp, ".members");
  std::vector<LayerSegments::File> members = SplitTarFile(tmp, out, tmp_members);
  absl::Cleanup drop_members = [&] {
    for (const LayerSegments::File& m : members) close(m.fd);
    std::error_code ec;
    std::filesystem::remove_all(tmp_members, ec);
  };
  std::shared_ptr<Layer> layer;
  {
    absl::MutexLock lock(&mu_);
    if (std::shared_ptr<Layer> old = FindLocked(decoded->digest)) {
      LayerGuard held(*old, Held(mu_));
      if (old->has_spec || old->pins > 0 || old->jobs > 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            name, ": its decompressed layer ", decoded->digest.str(), " is in use and unusable"));
      }
      // A partial or unsealed copy from an earlier process: replaced.
      old->gen++;
      cached_bytes_ -= old->cached_bytes;
      layers_.erase(decoded->digest);
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
    layer =
        std::make_shared<Layer>(mu_, decoded->digest, decoded->size, options_.whole_chunk_size, fd);
    if (!members.empty()) {
      // The split files go under the decoded digest (those of a copy replaced above go first).
      store_.RemoveMembers(decoded->digest);
      const std::string dir = absl::StrCat(options_.dir, "/blobs/sha256/",
                                           LayerStore::MemberDirNameOf(decoded->digest));
      if (rename(tmp_members.c_str(), dir.c_str()) != 0) {
        // Served from the open files all the same; a restart decodes it again.
        Log(absl::StrCat(tmp_members, ": rename: ", strerror(errno)));
      }
      std::vector<std::pair<uint64_t, uint64_t>> rows;
      for (const LayerSegments::File& m : members) rows.emplace_back(m.offset, m.length);
      layer->SetSegments(
          std::make_shared<const LayerSegments>(fcntl(fd, F_DUPFD_CLOEXEC, 0), std::move(members)));
      members.clear();
      if (absl::Status s = journal_.RecordMembers(decoded->digest.str(), rows); !s.ok()) {
        Log(s.message());
      }
    }
    LayerGuard held(*layer, Held(mu_));
    layer->mode = VerifyMode::kWholeLayer;
    layer->has_spec = true;
    layer->decoded = true;
    layer->refs.insert(spec.model_ref);
    layer->last_used = ++clock_;
    // Present, not verified: nothing is served before RunWholeVerify below marks it.
    layer->ResetChunks(ChunkState::kPresent);
    layer->cached_bytes = layer->size;
    cached_bytes_ += layer->size;
    layer->whole_verify_scheduled = true;
    layer->jobs++;
    if (absl::Status s = journal_.UpsertLayer(RecordOf(*layer, false, "", "")); !s.ok()) {
      Log(s.message());
    }
    layers_[layer->digest] = layer;
  }
  // The whole-layer check of the file as written (it also computes the local index later
  // re-checks use), then the flush, the records and the seal. A mismatch quarantines it.
  hashed.digest = decoded->digest;
  RunWholeVerify(layer, VerifyMode::kWholeLayer, &hashed);
  {
    absl::MutexLock lock(&mu_);
    LayerGuard held(*layer, Held(mu_));
    if (!layer->whole_verified || layer->quarantined) {
      return absl::DataLossError(absl::StrCat(name, ": its decompressed layer ",
                                              decoded->digest.str(),
                                              " failed verification as written to the cache"));
    }
  }
  if (absl::Status s = journal_.RecordDecoded(spec.source.str(), decoded->digest.str()); !s.ok()) {
    Log(s.message());  // only costs a decode after a restart when M has no diffIds
  }
  // The compressed bytes are no longer needed to serve the model: evictable from here on.
  UnregisterLayer(spec.source, spec.model_ref);
  return DecodedLayer{decoded->digest, decoded->size};
}

}  // namespace modelfs
