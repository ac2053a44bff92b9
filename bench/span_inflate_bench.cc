// span_inflate_bench: the CPU cost of serving ranges of a .tar+gzip layer through its seek
// index, with ISA-L's igzip and with zlib, measured in the same run on the same bytes; and
// zstd frames beside them. Prints CPU-s per GiB of decoded output (lead-in included) for
// whole-layer decoding and for random 4 MiB reads, and the compressed bytes a read fetched.
// Not a test: run by hand, `span_inflate_bench [MiB]` (default 256).
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/oci/seek_index.h"
#include "core/oci/span_decoder.h"
#include "testsupport/testing/compress.h"

using namespace modelfs;

namespace {

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// bf16-like: a random mantissa byte beside an exponent byte from a narrow range (gzip -6 gives
// about 0.79 of the bytes, as the issue measured on synthetic weights).
std::string Weights(size_t n) {
  std::mt19937_64 rng(42);
  std::string out(n, '\0');
  for (size_t i = 0; i < n; i += 2) {
    const uint64_t r = rng();
    out[i] = static_cast<char>(r);
    if (i + 1 < n) out[i + 1] = static_cast<char>(0x3c + (r >> 8) % 3);
  }
  return out;
}

struct Result {
  double cpu = 0;
  uint64_t produced = 0;
  uint64_t compressed = 0;
  uint64_t reads = 0;
};

Result Run(const SeekIndex& index, const std::string& compressed, GzipInflater inflater,
           const std::vector<std::pair<uint64_t, uint64_t>>& ranges) {
  Result r;
  const double t0 = CpuSeconds();
  for (auto [off, len] : ranges) {
    SeekRangeStats stats;
    uint64_t got = 0;
    absl::Status s = DecodeSeekRange(
        index, off, len, "bench",
        [&](uint64_t o, uint64_t l, const SpanDecoder::Sink& sink) {
          return sink(std::string_view(compressed).substr(o, l));
        },
        [&](std::string_view piece) {
          got += piece.size();
          return absl::OkStatus();
        },
        inflater, &stats);
    if (!s.ok() || got != len) {
      fprintf(stderr, "decode failed: %s\n", s.ToString().c_str());
      exit(1);
    }
    r.produced += len + stats.lead_in;
    r.compressed += stats.compressed_bytes;
    r.reads++;
  }
  r.cpu = CpuSeconds() - t0;
  return r;
}

void Print(const char* name, const Result& r) {
  const double gib = static_cast<double>(r.produced) / (1ull << 30);
  printf("| %-34s | %8.3f | %6.2f | %9.2f |\n", name, r.cpu / gib, gib,
         static_cast<double>(r.compressed) / r.reads / (1 << 20));
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? strtoul(argv[1], nullptr, 10) : 256;
  const std::string plain = Weights(mib << 20);
  const std::string gz = testing::Gzip(plain);
  const std::string zst = testing::ZstdFrames(plain, 1 << 20);
  absl::StatusOr<SeekIndex> gzi = BuildSeekIndex(LayerEncoding::kTarGzip, gz);
  absl::StatusOr<SeekIndex> zsi = BuildSeekIndex(LayerEncoding::kTarZstd, zst);
  if (!gzi.ok() || !zsi.ok()) {
    fprintf(stderr, "index: %s %s\n", gzi.status().ToString().c_str(),
            zsi.status().ToString().c_str());
    return 1;
  }
  printf(
      "%zu MiB of bf16-like bytes; gzip -6 %.3f of them, %zu points (%zu B of index); "
      "zstd -3 in 1 MiB frames %.3f, %zu points\n\n",
      mib, static_cast<double>(gz.size()) / plain.size(), gzi->points.size(),
      SerializeSeekIndex(*gzi).size(), static_cast<double>(zst.size()) / plain.size(),
      zsi->points.size());
  std::vector<std::pair<uint64_t, uint64_t>> whole = {{0, plain.size()}};
  std::vector<std::pair<uint64_t, uint64_t>> random;
  std::mt19937_64 rng(7);
  for (size_t i = 0; i < 2 * mib / 4; ++i) {
    random.push_back({rng() % (plain.size() - (4 << 20)), 4 << 20});
  }
  printf("| decoder, reads | CPU-s/GiB decoded | GiB decoded | compressed MiB per read |\n");
  printf("|---|---:|---:|---:|\n");
  Print("gzip, igzip (ISA-L), whole layer", Run(*gzi, gz, GzipInflater::kIsal, whole));
  Print("gzip, zlib, whole layer", Run(*gzi, gz, GzipInflater::kZlib, whole));
  Print("gzip, igzip (ISA-L), random 4 MiB", Run(*gzi, gz, GzipInflater::kIsal, random));
  Print("gzip, zlib, random 4 MiB", Run(*gzi, gz, GzipInflater::kZlib, random));
  Print("zstd frames, whole layer", Run(*zsi, zst, GzipInflater::kIsal, whole));
  Print("zstd frames, random 4 MiB", Run(*zsi, zst, GzipInflater::kIsal, random));
  return 0;
}
