// formats_bench: what parsing a model header costs modelfs, beside a baseline measured in the
// same run on the same bytes.
//   (a) a safetensors header with many tensors (an MoE checkpoint lists 10,000+): modelfs's
//       validating parser (through a file RangeReader, as `inspect` uses it) against
//       nlohmann::json::parse of the same header bytes, which is what a naive reader does;
//   (b) a GGUF whose metadata carries a large tokenizer (token strings, scores, token types):
//       modelfs's parser against reading the header bytes sequentially and hashing them with
//       SHA-256, the cost of merely touching every byte once.
// Prints, per parser: median wall time of N runs, peak RSS growth while parsing (VmHWM after
// resetting it through /proc/self/clear_refs, in a forked child so allocator state from one
// parser does not hide another's), the ratio to the baseline, and bytes read.
//
//   formats_bench [--runs N] [--tensors N] [--vocab N]
#include <fcntl.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/formats/gguf.h"
#include "core/formats/gguf_writer.h"
#include "core/formats/safetensors.h"
#include "core/io/range_reader.h"
#include "core/oci/digest.h"
#include "core/text/number_format.h"
#include "nlohmann/json.hpp"

namespace modelfs {
namespace {

[[noreturn]] void Die(const std::string& what) {
  fprintf(stderr, "formats_bench: %s\n", what.c_str());
  exit(1);
}

void Check(const absl::Status& s) {
  if (!s.ok()) Die(s.ToString());
}

// A field of /proc/self/status in KiB ("VmRSS", "VmHWM"), or -1.
long ProcStatusKib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string prefix = std::string(field) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return std::strtol(line.c_str() + prefix.size(), nullptr, 10);
  }
  return -1;
}

// Resets VmHWM to the current RSS (Linux 4.0+); false when the kernel refuses.
bool ResetPeakRss() {
  int fd = open("/proc/self/clear_refs", O_WRONLY);
  if (fd < 0) return false;
  bool ok = write(fd, "5", 1) == 1;
  close(fd);
  return ok;
}

struct Measurement {
  double median_ms = 0;
  long peak_rss_delta_kib = 0;  // -1: unknown
  uint64_t bytes_read = 0;
};

// One parse: does the work, keeps its result alive until it returns, reports bytes read.
using ParseFn = std::function<uint64_t()>;

// Peak RSS growth of one call, measured in a forked child.
long PeakRssDeltaKib(const ParseFn& fn) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    close(fds[0]);
    malloc_trim(0);
    long delta = -1;
    if (ResetPeakRss()) {
      const long before = ProcStatusKib("VmRSS");
      fn();
      delta = ProcStatusKib("VmHWM") - before;
    } else {
      struct rusage ru0, ru1;
      getrusage(RUSAGE_SELF, &ru0);
      fn();
      getrusage(RUSAGE_SELF, &ru1);
      delta = ru1.ru_maxrss - ru0.ru_maxrss;  // only growth past the old peak shows
    }
    if (write(fds[1], &delta, sizeof(delta)) != sizeof(delta)) _exit(1);
    _exit(0);
  }
  close(fds[1]);
  long delta = -1;
  if (read(fds[0], &delta, sizeof(delta)) != sizeof(delta)) delta = -1;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return delta;
}

Measurement Measure(int runs, const ParseFn& fn) {
  Measurement m;
  m.bytes_read = fn();  // warm-up: page cache, allocator
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    uint64_t bytes = fn();
    auto t1 = std::chrono::steady_clock::now();
    if (bytes != m.bytes_read) Die("a parser read a different byte count on a rerun");
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  m.median_ms = ms[ms.size() / 2];
  m.peak_rss_delta_kib = PeakRssDeltaKib(fn);
  return m;
}

std::string ReadPrefix(const std::string& path, uint64_t n) {
  std::string out(n, '\0');
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) Die("cannot open " + path);
  uint64_t done = 0;
  while (done < n) {
    ssize_t got = pread(fd, out.data() + done, std::min<uint64_t>(n - done, 1 << 20), done);
    if (got <= 0) Die("short read of " + path);
    done += got;
  }
  close(fd);
  return out;
}

uint64_t LeU64(const std::string& b) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(b[i])) << (8 * i);
  return n;
}

std::string Rss(long kib) {
  if (kib < 0) return "n/a";
  return absl::StrFormat("%.2f MiB", kib / 1024.0);
}

void PrintRow(const std::string& c, const std::string& parser, const Measurement& m,
              const Measurement& baseline) {
  std::string ratio = absl::StrFormat("%.2fx", m.median_ms / baseline.median_ms);
  std::string rss_ratio = (m.peak_rss_delta_kib > 0 && baseline.peak_rss_delta_kib > 0)
                              ? absl::StrFormat("%.2fx", static_cast<double>(m.peak_rss_delta_kib) /
                                                             baseline.peak_rss_delta_kib)
                              : "-";
  printf("%-34s %-28s %10.3f %7s %14s %7s %14s\n", c.c_str(), parser.c_str(), m.median_ms,
         ratio.c_str(), Rss(m.peak_rss_delta_kib).c_str(), rss_ratio.c_str(),
         WithCommas(m.bytes_read).c_str());
}

// (a) A Mixtral/DeepSeek-like expert layout: many small tensors, so the header is large.
std::string WriteManyTensorSafetensors(const std::string& dir, int tensors) {
  SafetensorsWriter w;
  static const char* kProj[] = {"gate_proj", "up_proj", "down_proj"};
  int n = 0;
  for (int layer = 0; n < tensors; ++layer) {
    for (int expert = 0; expert < 64 && n < tensors; ++expert) {
      for (int p = 0; p < 3 && n < tensors; ++p, ++n) {
        Check(w.AddSparseTensor(
            absl::StrCat("model.layers.", layer, ".mlp.experts.", expert, ".", kProj[p], ".weight"),
            "BF16", {static_cast<uint64_t>(64 + p * 32), 128}));
      }
    }
  }
  w.SetMetadata("format", "pt");
  const std::string path = dir + "/experts.safetensors";
  Check(w.WriteFile(path));
  return path;
}

// (b) A Llama-3-sized vocabulary: BPE-looking strings, float scores, int32 token types.
std::string WriteBigTokenizerGguf(const std::string& dir, int vocab, uint64_t* tokens_bytes) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetString("general.name", "tokenizer bench");
  w.SetUint32("llama.block_count", 2);
  w.SetUint32("llama.context_length", 8192);
  w.SetUint32("llama.embedding_length", 256);
  w.SetUint32("llama.attention.head_count", 4);
  w.SetUint32("llama.attention.head_count_kv", 2);
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  uint64_t state = 0x1234;
  *tokens_bytes = 0;
  for (int i = 0; i < vocab; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const int len = 1 + static_cast<int>((state >> 33) % 6);  // 1..6 letters
    std::string t = (state >> 20) & 1 ? "\xc4\xa0" : "";      // "Ġ": a leading space
    for (int k = 0; k < len; ++k) t.push_back(static_cast<char>('a' + ((state >> (k * 4)) % 26)));
    absl::StrAppend(&t, absl::Hex(i));  // unique
    *tokens_bytes += 8 + t.size();
    tokens.push_back(std::move(t));
    scores.push_back(-static_cast<float>(i));
    types.push_back(i < 256 ? 3 : 1);
  }
  w.SetString("tokenizer.ggml.model", "gpt2");
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetFloat32Array("tokenizer.ggml.scores", scores);
  w.SetInt32Array("tokenizer.ggml.token_type", types);
  Check(w.AddSparseTensor("token_embd.weight", {256, static_cast<uint64_t>(vocab)}, 1));
  Check(w.AddSparseTensor("blk.0.attn_q.weight", {256, 256}, 8));
  Check(w.AddSparseTensor("output_norm.weight", {256}, 0));
  const std::string path = dir + "/tokenizer.gguf";
  Check(w.WriteFile(path));
  return path;
}

int Main(int argc, char** argv) {
  int runs = 11, tensors = 12000, vocab = 128256;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> int {
      if (i + 1 >= argc) Die("missing value for " + a);
      return std::atoi(argv[++i]);
    };
    if (a == "--runs")
      runs = std::max(1, next());
    else if (a == "--tensors")
      tensors = std::max(1, next());
    else if (a == "--vocab")
      vocab = std::max(1, next());
    else
      Die("usage: formats_bench [--runs N] [--tensors N] [--vocab N]");
  }
  char tmpl[] = "/tmp/formats_bench.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) Die("mkdtemp failed");
  const std::string dir = tmpl;

  printf(
      "formats_bench: median of %d runs; peak RSS delta = VmHWM growth during one parse "
      "(forked child)\n\n",
      runs);
  printf("%-34s %-28s %10s %7s %14s %7s %14s\n", "input", "parser", "median ms", "ratio",
         "peak RSS delta", "ratio", "bytes read");

  // (a) safetensors
  const std::string st_path = WriteManyTensorSafetensors(dir, tensors);
  const uint64_t st_header = 8 + LeU64(ReadPrefix(st_path, 8));
  Measurement st_base = Measure(runs, [&] {
    std::string h = ReadPrefix(st_path, st_header);
    nlohmann::json j = nlohmann::json::parse(h.begin() + 8, h.end(), nullptr, false);
    if (j.is_discarded() || j.size() < static_cast<size_t>(tensors)) Die("baseline json failed");
    return h.size();
  });
  Measurement st_ours = Measure(runs, [&] {
    auto reader = OpenFileRangeReader(st_path);
    if (!reader.ok()) Die(reader.status().ToString());
    auto f = ParseSafetensors(**reader);
    if (!f.ok()) Die(f.status().ToString());
    if (f->tensors.size() != static_cast<size_t>(tensors)) Die("wrong tensor count");
    return (*reader)->stats().bytes;
  });
  const std::string st_label = absl::StrCat("safetensors, ", WithCommas(tensors), " tensors");
  PrintRow(st_label, "modelfs ParseSafetensors", st_ours, st_base);
  PrintRow(absl::StrCat("  header ", WithCommas(st_header), " B"), "nlohmann::json::parse (base)",
           st_base, st_base);

  // (b) GGUF
  uint64_t tokens_bytes = 0;
  const std::string gguf_path = WriteBigTokenizerGguf(dir, vocab, &tokens_bytes);
  uint64_t gguf_header = 0;
  {
    auto reader = OpenFileRangeReader(gguf_path);
    if (!reader.ok()) Die(reader.status().ToString());
    auto g = ParseGguf(**reader);
    if (!g.ok()) Die(g.status().ToString());
    gguf_header = g->data_offset;
  }
  Measurement gguf_base = Measure(runs, [&] {
    int fd = open(gguf_path.c_str(), O_RDONLY);
    if (fd < 0) Die("cannot open " + gguf_path);
    std::string buf(1 << 20, '\0');
    Sha256 sha;
    uint64_t done = 0;
    while (done < gguf_header) {
      ssize_t got = read(fd, buf.data(), std::min<uint64_t>(buf.size(), gguf_header - done));
      if (got <= 0) Die("short read");
      sha.Update(buf.data(), static_cast<size_t>(got));
      done += got;
    }
    close(fd);
    Digest d = sha.Finish();
    if (d.str().empty()) Die("no digest");
    return done;
  });
  Measurement gguf_ours = Measure(runs, [&] {
    auto reader = OpenFileRangeReader(gguf_path);
    if (!reader.ok()) Die(reader.status().ToString());
    auto g = ParseGguf(**reader);
    if (!g.ok()) Die(g.status().ToString());
    if (g->GetArrayLength("tokenizer.ggml.tokens") != static_cast<uint64_t>(vocab)) {
      Die("wrong vocabulary size");
    }
    return (*reader)->stats().bytes;
  });
  const std::string gguf_label = absl::StrCat("GGUF, ", WithCommas(vocab), "-token tokenizer");
  PrintRow(gguf_label, "modelfs ParseGguf", gguf_ours, gguf_base);
  PrintRow(absl::StrCat("  header ", WithCommas(gguf_header), " B"), "read + sha256 (base)",
           gguf_base, gguf_base);
  printf("\ntoken strings array: %s bytes on disk (+ %s scores, %s token types)\n",
         WithCommas(tokens_bytes).c_str(), WithCommas(4ull * vocab).c_str(),
         WithCommas(4ull * vocab).c_str());

  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}

}  // namespace
}  // namespace modelfs

int main(int argc, char** argv) { return modelfs::Main(argc, argv); }
