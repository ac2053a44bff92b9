// LayerEviction (layer_eviction.h): least recently used first, and on request.
#include "core/cache/layer_eviction.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace modelfs {

std::pair<uint64_t, uint64_t> LayerEviction::EvictUnreferenced(uint64_t target) {
  // Each victim with its cached bytes, taken under the lock.
  std::vector<std::pair<std::shared_ptr<CacheLayer>, uint64_t>> victims;
  {
    TableLock lock(table_);
    if (table_.cached_bytes() <= target) return {0, 0};
    std::vector<std::shared_ptr<CacheLayer>> candidates;
    for (const std::shared_ptr<CacheLayer>& layer : table_.Layers()) {
      LayerGuard held(*layer, Held(table_));
      if (layer->refs.empty() && layer->pins == 0 && layer->jobs == 0) {
        candidates.push_back(layer);
      }
    }
    std::sort(candidates.begin(), candidates.end(),
              [this](const auto& a, const auto& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(table_.mu()) {
                LayerGuard held_a(*a, Held(table_));
                LayerGuard held_b(*b, Held(table_));
                return a->last_used < b->last_used;
              });
    for (auto& layer : candidates) {
      if (table_.cached_bytes() <= target) break;
      const uint64_t layer_bytes = UnlinkLocked(layer);
      victims.emplace_back(std::move(layer), layer_bytes);
    }
  }
  uint64_t bytes = 0;
  for (const auto& [layer, layer_bytes] : victims) {
    bytes += layer_bytes;
    FinishEvict(layer, layer_bytes, "unreferenced");
  }
  return {victims.size(), bytes};
}

uint64_t LayerEviction::UnlinkLocked(const std::shared_ptr<CacheLayer>& layer) {
  LayerGuard held(*layer, Held(table_));
  flights_.DropMemoryLocked(*layer);
  return table_.Unlink(*layer);
}

void LayerEviction::FinishEvict(const std::shared_ptr<CacheLayer>& layer, uint64_t bytes,
                                absl::string_view why) {
  counters_.evicted_layers++;
  Log(log::Info("cache", absl::StrCat("evicted layer (", why, ")"))
          .Field("digest", layer->digest.str())
          .Field("bytes", bytes));
  journal_.Forget(layer->digest.str());
  store_.Remove(layer->digest);
}

CacheEvictResult LayerEviction::EvictLayers(const std::vector<Digest>& digests) {
  CacheEvictResult out;
  std::vector<std::pair<std::shared_ptr<CacheLayer>, uint64_t>> victims;
  {
    TableLock lock(table_);
    for (const Digest& digest : digests) {
      std::shared_ptr<CacheLayer> layer = table_.Find(digest);
      if (!layer) continue;
      {
        LayerGuard held(*layer, Held(table_));
        if (!layer->refs.empty() || layer->pins != 0 || layer->jobs != 0) {
          out.busy.push_back(digest);
          continue;
        }
      }
      const uint64_t layer_bytes = UnlinkLocked(layer);
      victims.emplace_back(std::move(layer), layer_bytes);
    }
  }
  for (const auto& [layer, layer_bytes] : victims) {
    out.layers++;
    out.bytes += layer_bytes;
    FinishEvict(layer, layer_bytes, "evicted on request");
  }
  return out;
}

}  // namespace modelfs
