// LayerTable (layer_table.h): the locked operations on the cache's table of layers.
#include "core/cache/layer_table.h"

namespace modelfs {

std::shared_ptr<CacheLayer> LayerTable::NewLayer(Digest digest, uint64_t size, uint64_t chunk_size,
                                                 int fd) const {
  return std::make_shared<CacheLayer>(mu_, std::move(digest), size, chunk_size, fd);
}

std::shared_ptr<CacheLayer> LayerTable::Find(const Digest& digest) const {
  auto it = layers_.find(digest);
  return it == layers_.end() ? nullptr : it->second;
}

std::shared_ptr<CacheLayer> LayerTable::FindRegistered(const Digest& digest) const {
  std::shared_ptr<CacheLayer> layer = Find(digest);
  if (!layer) return nullptr;
  LayerGuard held(*layer, Held(*this));
  return layer->has_spec && !layer->refs.empty() ? layer : nullptr;
}

bool LayerTable::IsCurrent(const CacheLayer& layer) const {
  auto it = layers_.find(layer.digest);
  return it != layers_.end() && it->second.get() == &layer;
}

void LayerTable::Put(std::shared_ptr<CacheLayer> layer) {
  const Digest& digest = layer->digest;
  layers_[digest] = std::move(layer);
}

void LayerTable::Erase(const Digest& digest) { layers_.erase(digest); }

uint64_t LayerTable::Unlink(CacheLayer& layer) {
  layer.gen++;
  cached_bytes_ -= layer.cached_bytes;
  layers_.erase(layer.digest);
  return layer.cached_bytes;
}

std::vector<std::shared_ptr<CacheLayer>> LayerTable::Layers() const {
  std::vector<std::shared_ptr<CacheLayer>> out;
  out.reserve(layers_.size());
  for (const auto& entry : layers_) out.push_back(entry.second);
  return out;
}

void LayerTable::Clear() { layers_.clear(); }

void LayerTable::AddLayerBytes(CacheLayer& layer, uint64_t bytes) {
  TableGuard g(*this, Held(layer));
  layer.cached_bytes += bytes;
  cached_bytes_ += bytes;
}

void LayerTable::RemoveLayerBytes(CacheLayer& layer, uint64_t bytes) {
  TableGuard g(*this, Held(layer));
  layer.cached_bytes -= bytes;
  cached_bytes_ -= bytes;
}

LayerRecord RecordOf(const CacheLayer& layer, bool whole_verified, std::string local_index,
                     std::string seal) {
  LayerRecord r;
  r.digest = layer.digest.str();
  r.size = layer.size;
  r.chunk_size = layer.chunk_size;
  r.mode = static_cast<int>(layer.mode);
  r.whole_verified = whole_verified;
  r.local_index = std::move(local_index);
  r.last_used = layer.last_used;
  r.seal = std::move(seal);
  r.audited = layer.audited;
  r.verity = layer.verity;
  return r;
}

}  // namespace modelfs
