// Verified reads of layers in containerd's content store (see content_store_blob_reader.h).
#include "snapshotter/content/content_store_blob_reader.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status/status_macros.h"

namespace modelfs::snapshotter {

struct ContentStoreBlobReader::Layer {
  Digest digest;
  uint64_t size = 0;
  // model_ref -> its namespace; guarded by the reader's mu_.
  std::map<std::string, std::string> refs;

  // Held for the whole-layer check so it runs once; guards the fields below.
  absl::Mutex verify_mu;
  bool verified ABSL_GUARDED_BY(verify_mu) = false;
  absl::Status quarantined ABSL_GUARDED_BY(verify_mu);  // kDataLoss once a check failed
  ChunkIndex index;  // set (under verify_mu) before `verified`; read-only afterwards
  std::string ns;    // the namespace reads use, set with `index`
};

namespace {

ContentStoreReaderOptions Checked(ContentStoreReaderOptions o) {
  if (!ChunkIndex::ValidChunkSize(o.chunk_size)) o.chunk_size = ChunkIndex::kDefaultChunkSize;
  if (o.piece_bytes == 0) o.piece_bytes = 64ull << 20;
  return o;
}

}  // namespace

ContentStoreBlobReader::ContentStoreBlobReader(ContentStore* store,
                                               ContentStoreReaderOptions options)
    : store_(store), options_(Checked(options)) {}

ContentStoreBlobReader::~ContentStoreBlobReader() = default;

absl::Status ContentStoreBlobReader::AddLayer(const std::string& model_ref, const std::string& ns,
                                              const Digest& digest, uint64_t size) {
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = layers_.try_emplace(digest);
  if (inserted) {
    it->second = std::make_shared<Layer>();
    it->second->digest = digest;
    it->second->size = size;
  } else if (it->second->size != size) {
    return absl::InvalidArgumentError(absl::StrCat("layer ", digest.str(), " of model ", model_ref,
                                                   " has size ", size, ", but ", it->second->size,
                                                   " elsewhere"));
  }
  it->second->refs[model_ref] = ns;
  return absl::OkStatus();
}

void ContentStoreBlobReader::RemoveModel(const std::string& model_ref) {
  std::vector<Digest> dropped;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = layers_.begin(); it != layers_.end();) {
      it->second->refs.erase(model_ref);
      if (it->second->refs.empty()) {
        dropped.push_back(it->first);
        it = layers_.erase(it);
      } else {
        ++it;
      }
    }
  }
  absl::MutexLock lock(&recent_mu_);
  recent_.erase(std::remove_if(recent_.begin(), recent_.end(),
                               [&](const Recent& r) {
                                 return std::find(dropped.begin(), dropped.end(), r.digest) !=
                                        dropped.end();
                               }),
                recent_.end());
}

bool ContentStoreBlobReader::Has(const Digest& digest) const {
  absl::MutexLock lock(&mu_);
  return layers_.count(digest) != 0;
}

std::shared_ptr<ContentStoreBlobReader::Layer> ContentStoreBlobReader::Find(
    const Digest& digest) const {
  absl::MutexLock lock(&mu_);
  auto it = layers_.find(digest);
  return it == layers_.end() ? nullptr : it->second;
}

absl::Status ContentStoreBlobReader::VerifyLayer(const Digest& digest) {
  std::shared_ptr<Layer> layer = Find(digest);
  if (layer == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("layer ", digest.str(), " is not served from containerd's content store"));
  }
  absl::MutexLock verify(&layer->verify_mu);
  if (layer->verified) return absl::OkStatus();
  if (!layer->quarantined.ok()) return layer->quarantined;
  std::string ns;
  {
    absl::MutexLock lock(&mu_);
    if (layer->refs.empty()) {
      return absl::NotFoundError(absl::StrCat("layer ", digest.str(), " was removed"));
    }
    ns = layer->refs.begin()->second;
  }
  // BLAKE3: every later read of the layer is checked again against this index.
  ChunkIndexBuilder builder(options_.chunk_size, ChunkDigestAlgorithm::kBlake3);
  uint64_t got = 0;
  for (uint64_t offset = 0; offset < layer->size;) {
    const uint64_t n = std::min(options_.piece_bytes, layer->size - offset);
    absl::Status st =
        store_->Read(ns, digest, offset, n, options_.clock->Now() + options_.call_deadline,
                     [&](std::string_view piece) {
                       builder.Update(piece);
                       got += piece.size();
                       return absl::OkStatus();
                     });
    if (absl::IsOutOfRange(st)) {
      layer->quarantined = absl::DataLossError(
          absl::StrCat("layer ", digest.str(), " in containerd's content store (namespace \"", ns,
                       "\") is shorter than its ", layer->size, " bytes: ", st.message()));
      return layer->quarantined;
    }
    RETURN_IF_ERROR(st);
    offset += n;
  }
  ChunkIndex index = builder.Finish();
  if (index.blob_digest != digest || got != layer->size) {
    layer->quarantined = absl::DataLossError(absl::StrCat(
        "layer ", digest.str(), " in containerd's content store (namespace \"", ns,
        "\") failed verification: its ", got, " bytes hash to ", index.blob_digest.str()));
    return layer->quarantined;
  }
  index.blob_size = layer->size;
  layer->index = std::move(index);
  layer->ns = ns;
  layer->verified = true;
  absl::MutexLock lock(&mu_);
  ++layers_verified_;
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const std::string>> ContentStoreBlobReader::VerifiedChunk(
    const Layer& layer, uint64_t chunk) {
  {
    absl::MutexLock lock(&recent_mu_);
    for (auto it = recent_.begin(); it != recent_.end(); ++it) {
      if (it->chunk == chunk && it->digest == layer.digest) {
        Recent hit = *it;
        recent_.erase(it);
        recent_.push_front(hit);
        return hit.bytes;
      }
    }
  }
  const uint64_t offset = layer.index.ChunkOffset(chunk);
  const uint64_t length = layer.index.ChunkLength(chunk);
  std::string bytes;
  bytes.reserve(length);
  absl::Status st =
      store_->Read(layer.ns, layer.digest, offset, length,
                   options_.clock->Now() + options_.call_deadline, [&](std::string_view piece) {
                     bytes.append(piece);
                     return absl::OkStatus();
                   });
  if (absl::IsOutOfRange(st)) st = absl::DataLossError(st.message());
  RETURN_IF_ERROR(st);
  RETURN_IF_ERROR(layer.index.VerifyChunk(chunk, bytes));
  auto shared = std::make_shared<const std::string>(std::move(bytes));
  absl::MutexLock lock(&recent_mu_);
  bytes_read_ += length;
  recent_.push_front(Recent{layer.digest, chunk, shared});
  while (recent_.size() > options_.recent_chunks) recent_.pop_back();
  return shared;
}

absl::StatusOr<std::string> ContentStoreBlobReader::Read(const Digest& digest, uint64_t offset,
                                                         uint64_t length) {
  RETURN_IF_ERROR(VerifyLayer(digest));
  std::shared_ptr<Layer> layer = Find(digest);
  if (layer == nullptr) {
    return absl::NotFoundError(absl::StrCat("layer ", digest.str(), " was removed"));
  }
  if (offset >= layer->size || length == 0) return std::string();
  const uint64_t end = std::min(layer->size, offset + length);
  const uint64_t chunk_size = layer->index.chunk_size;
  std::string out;
  out.reserve(end - offset);
  for (uint64_t c = offset / chunk_size; c * chunk_size < end; ++c) {
    absl::StatusOr<std::shared_ptr<const std::string>> bytes = VerifiedChunk(*layer, c);
    if (!bytes.ok()) {
      if (absl::IsDataLoss(bytes.status())) {
        absl::MutexLock verify(&layer->verify_mu);
        layer->verified = false;
        layer->quarantined = bytes.status();
      }
      return bytes.status();
    }
    const uint64_t chunk_start = c * chunk_size;
    const uint64_t from = std::max(offset, chunk_start) - chunk_start;
    const uint64_t to = std::min(end, chunk_start + (*bytes)->size()) - chunk_start;
    out.append(**bytes, from, to - from);
  }
  return out;
}

bool ContentStoreBlobReader::IsReady(const Digest& digest, uint64_t offset, uint64_t length) {
  std::shared_ptr<Layer> layer = Find(digest);
  if (layer == nullptr) return true;  // fails fast
  // A check in progress holds verify_mu: not ready, and no waiting for it here.
  if (!layer->verify_mu.TryLock()) return false;
  const bool ready = layer->verified || !layer->quarantined.ok();
  layer->verify_mu.Unlock();
  return ready;
}

uint64_t ContentStoreBlobReader::layers_verified() const {
  absl::MutexLock lock(&mu_);
  return layers_verified_;
}

uint64_t ContentStoreBlobReader::bytes_read() const {
  absl::MutexLock lock(&recent_mu_);
  return bytes_read_;
}

}  // namespace modelfs::snapshotter
