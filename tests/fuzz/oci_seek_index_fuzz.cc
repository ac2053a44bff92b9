// Fuzzes the seek index (core/oci/seek_index.h) and span decoding (span_decoder.h). The first
// byte picks what the rest is:
//   0: a serialized index; an accepted one serializes back to the same bytes.
//   1: a gzip (or zstd, bit 7) stream; when an index builds from it (points every 1 KiB),
//      ranges decoded through the index with both inflaters equal the stream's plain decoding.
//   2: a gzip stream entered at a forged point (offset, bit count and window from the input):
//      decoding never aborts, whatever comes out.
//   3: a seek windows table (seek_windows.h); an accepted one serializes back to its first
//      table_size() bytes, and every window it places is checked without aborting.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/oci/seek_index.h"
#include "core/oci/seek_windows.h"
#include "core/oci/span_decoder.h"

using namespace modelfs;

namespace {

constexpr uint64_t kMaxOut = 16u << 20;

absl::StatusOr<std::string> Decode(const SeekIndex& index, std::string_view compressed,
                                   uint64_t off, uint64_t len, GzipInflater inflater) {
  std::string out;
  absl::Status s = DecodeSeekRange(
      index, off, len, "fuzz",
      [&](uint64_t o, uint64_t l, const SpanDecoder::Sink& sink) -> absl::Status {
        if (o > compressed.size()) return absl::OutOfRangeError("past end");
        return sink(compressed.substr(o, l));
      },
      [&](std::string_view piece) {
        if (out.size() + piece.size() > kMaxOut) return absl::ResourceExhaustedError("big");
        out.append(piece);
        return absl::OkStatus();
      },
      inflater);
  if (!s.ok()) return s;
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0] & 3;
  const std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);
  if (mode == 0) {
    absl::StatusOr<SeekIndex> index = ParseSeekIndex(in);
    if (index.ok() && SerializeSeekIndex(*index) != in) abort();
    return 0;
  }
  if (mode == 1) {
    const LayerEncoding encoding =
        data[0] & 0x80 ? LayerEncoding::kTarZstd : LayerEncoding::kTarGzip;
    absl::StatusOr<std::unique_ptr<SeekIndexBuilder>> b =
        SeekIndexBuilder::Create(encoding, "fuzz", 1024);
    if (!b.ok()) abort();
    std::string plain;
    absl::Status s = (*b)->Feed(in, [&](std::string_view piece) {
      if (plain.size() + piece.size() > kMaxOut) return absl::ResourceExhaustedError("big");
      plain.append(piece);
      return absl::OkStatus();
    });
    if (!s.ok()) return 0;
    absl::StatusOr<SeekIndex> index = (*b)->Finish();
    if (!index.ok()) return 0;
    absl::StatusOr<SeekIndex> again = ParseSeekIndex(SerializeSeekIndex(*index));
    if (!again.ok() || !(*again == *index)) abort();
    if (plain.empty()) return 0;
    // The index thinned to half its bytes (push and convert bound a model's windows) serves
    // the same ranges, across the points it dropped.
    const SeekIndex thin = ThinSeekIndex(*index, SerializeSeekIndex(*index).size() / 2);
    for (GzipInflater inflater : {GzipInflater::kIsal, GzipInflater::kZlib}) {
      for (size_t p = 0; p < index->points.size(); p += 1 + index->points.size() / 4) {
        const uint64_t off = index->points[p].uncompressed_offset;
        const uint64_t len = std::min<uint64_t>(plain.size() - off, 3000);
        for (const SeekIndex* ix : {static_cast<const SeekIndex*>(&*index), &thin}) {
          absl::StatusOr<std::string> got = Decode(*ix, in, off, len, inflater);
          if (!got.ok() || *got != plain.substr(off, len)) abort();
        }
      }
    }
    return 0;
  }
  if (mode == 3) {
    absl::StatusOr<SeekWindowsTable> t = ParseSeekWindowsTable(in);
    if (!t.ok()) return 0;
    if (t->index.points.size() != t->windows.size() || t->table_size() > in.size() ||
        SerializeSeekWindowsTable(*t) != in.substr(0, t->table_size())) {
      abort();
    }
    for (size_t i = 0; i < t->windows.size(); ++i) {
      const SeekWindowRef& w = t->windows[i];
      if (w.length == 0 || w.offset >= in.size()) continue;
      (void)CheckSeekWindow(*t, i, in.substr(w.offset, w.length), "fuzz");
    }
    return 0;
  }
  // mode 2: a forged block-boundary point into the fuzzer's bytes.
  if (in.size() < 8) return 0;
  SeekIndex index;
  index.encoding = LayerEncoding::kTarGzip;
  index.compressed_size = in.size();
  index.uncompressed_size = kMaxOut;
  index.points.push_back(SeekPoint{});
  SeekPoint p;
  p.kind = SeekPoint::Kind::kBlockBoundary;
  p.bits = static_cast<uint8_t>(in[0] & 7);
  p.compressed_offset = 1 + static_cast<uint8_t>(in[1]) % (in.size() - 1);
  p.uncompressed_offset = 1 << 20;
  const std::string window(static_cast<size_t>(static_cast<uint8_t>(in[2])) * 128 + 1, 'w');
  p.window_size = static_cast<uint32_t>(window.size());
  // The window as raw deflate: one stored block (BFINAL=1, BTYPE=00), LEN, NLEN, the bytes.
  const uint16_t n = static_cast<uint16_t>(window.size());
  p.window.push_back(1);
  p.window.push_back(static_cast<char>(n & 0xff));
  p.window.push_back(static_cast<char>(n >> 8));
  p.window.push_back(static_cast<char>(~n & 0xff));
  p.window.push_back(static_cast<char>((~n >> 8) & 0xff));
  p.window += window;
  index.points.push_back(p);
  const GzipInflater inflater = data[0] & 1 ? GzipInflater::kIsal : GzipInflater::kZlib;
  (void)Decode(index, in, p.uncompressed_offset, 4096, inflater);
  return 0;
}
