// The codec table, the two codecs that decode nothing (raw, tar), and the lookups.
#include "core/oci/layer_codec.h"

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "core/oci/layer_media_types.h"

namespace modelfs {

// A single file, as it is.
constinit const LayerCodec kRawCodec = {.name = "raw"};
// An uncompressed tar.
constinit const LayerCodec kTarCodec = {
    .name = "tar", .image_media_types = {kOciLayerTarMediaType}, .tar = true};

// The table: one line per codec (declared in layer_codec.h when code names it, else here:
// `extern const LayerCodec kFooCodec;  // codec_foo.cc`). No two codecs share a name, an image
// media type, a seek_id or a seek_name.
constexpr std::array<const LayerCodec*, 4> kCodecs = {
    &kRawCodec,   // above
    &kTarCodec,   // above
    &kGzipCodec,  // codec_gzip.cc
    &kZstdCodec,  // codec_zstd.cc
};

namespace {

// ScopedLayerCodecForTest's codec; null outside a test that registers one.
std::atomic<const LayerCodec*> test_codec{nullptr};

// The first codec (in the table, then the test's) for which `match` holds.
template <typename Match>
const LayerCodec* Find(const Match& match) {
  for (const LayerCodec* c : kCodecs) {
    if (match(*c)) return c;
  }
  const LayerCodec* t = test_codec.load(std::memory_order_acquire);
  return t != nullptr && match(*t) ? t : nullptr;
}

}  // namespace

std::ostream& operator<<(std::ostream& os, LayerEncoding e) { return os << e.name(); }

const LayerCodec* FindLayerCodecByName(std::string_view name) {
  return Find([&](const LayerCodec& c) { return c.name == name; });
}

const LayerCodec* FindLayerCodecByImageMediaType(std::string_view media_type) {
  return Find([&](const LayerCodec& c) {
    for (std::string_view m : c.image_media_types) {
      if (!m.empty() && m == media_type) return true;
    }
    return false;
  });
}

const LayerCodec* FindLayerCodecBySeekId(uint32_t seek_id) {
  if (seek_id == 0) return nullptr;
  return Find([&](const LayerCodec& c) { return c.seek_id == seek_id; });
}

const LayerCodec* FindLayerCodecBySeekName(std::string_view seek_name) {
  if (seek_name.empty()) return nullptr;
  return Find([&](const LayerCodec& c) { return c.seek_name == seek_name; });
}

std::string CompressedCodecList(bool with_ids) {
  std::string out;
  size_t n = 0;
  Find([&](const LayerCodec& c) {
    if (!c.compressed()) return false;
    if (n++ > 0) out += " or ";
    if (with_ids) {
      absl::StrAppend(&out, c.seek_id, " (", std::string(c.seek_name), ")");
    } else {
      out.append(c.seek_name);
    }
    return false;
  });
  return out;
}

ScopedLayerCodecForTest::ScopedLayerCodecForTest(const LayerCodec& codec) {
  const LayerCodec* none = nullptr;
  if (!test_codec.compare_exchange_strong(none, &codec)) {
    fputs("ScopedLayerCodecForTest: a test codec is registered already\n", stderr);
    abort();  // a test's mistake, not input
  }
}

ScopedLayerCodecForTest::~ScopedLayerCodecForTest() {
  test_codec.store(nullptr, std::memory_order_release);
}

}  // namespace modelfs
