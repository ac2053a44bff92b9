// modelfs-load: reads every byte of a model's files the way a model server does at start, for
// bench/load_bench.sh. Two loaders:
//   --mode mmap   maps each safetensors file, parses its header from the mapping and copies each
//                 tensor out of the mapping in offset order into one reusable buffer (safetensors
//                 load_file, llama.cpp);
//   --mode read   read() in 16 MiB calls into one buffer (vLLM --safetensors-load-strategy eager).
// Files that are not safetensors (config.json, tokenizer.json, ...) are read whole with read() in
// both modes. Prints the bytes read and the seconds taken; with --json, one JSON object.
//
// --ranks N (mmap only) loads as a tensor-parallel server does (vLLM, SGLang, TGI with TP = N):
// N rank processes start at once, each maps every file and copies only its own slice of each
// tensor, split the way Megatron-LM splits a llama (the rule, for a 2-D weight [out, in] as
// safetensors stores it, row-major):
//   - column-parallel, split on dim 0 (out): q_proj, k_proj, v_proj, gate_proj, up_proj, and the
//     vocab-parallel embed_tokens and lm_head: rank r copies rows [r*out/N, (r+1)*out/N), one
//     contiguous range of the tensor;
//   - row-parallel, split on dim 1 (in): o_proj and down_proj: rank r copies columns
//     [r*in/N, (r+1)*in/N) of every row, N-way strided pieces, so every rank faults every page
//     of these tensors;
//   - everything else (norms, 1-D tensors, a Mixtral router): every rank copies it whole.
// Fused checkpoints (qkv_proj, gate_up_proj) split on dim 0 the same way. The time printed is
// until the last rank is done (what a server waits for); per rank with --json.
//
//   modelfs-load --mode mmap|read [--ranks N] [--json] FILE...
//
// Exit codes: 0 every file was read, 1 an I/O error or a malformed safetensors header (named on
// stderr), 2 bad usage. It uses only libc and nlohmann-json, so it measures the file system and
// not the project's own code.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace {

constexpr size_t kReadChunk = 16u << 20;
// safetensors caps its header at 100 MB; anything larger is not a safetensors file.
constexpr uint64_t kMaxHeader = 100'000'000;

struct Totals {
  uint64_t bytes = 0;
  uint64_t tensors = 0;
  uint8_t checksum = 0;  // folds one byte of every copy, so no copy can be optimised away
};

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

bool Fail(const std::string& path, const std::string& what) {
  fprintf(stderr, "modelfs-load: %s: %s\n", path.c_str(), what.c_str());
  return false;
}

bool FailErrno(const std::string& path, const char* op) {
  return Fail(path, std::string(op) + ": " + strerror(errno));
}

// Reads the whole file with read() calls of up to kReadChunk bytes into buf.
bool ReadWhole(const std::string& path, int fd, std::vector<char>& buf, Totals& t) {
  for (;;) {
    ssize_t n = read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return FailErrno(path, "read");
    }
    if (n == 0) return true;
    t.bytes += static_cast<uint64_t>(n);
    t.checksum ^= static_cast<uint8_t>(buf[0]);
  }
}

// A safetensors header is 8 bytes of little-endian length, then that much JSON starting with '{'.
// Returns the header length if the first bytes of the file look like one.
std::optional<uint64_t> SafetensorsHeaderLength(int fd, uint64_t file_size) {
  unsigned char head[9];
  if (file_size < sizeof head || pread(fd, head, sizeof head, 0) != sizeof head) return {};
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | head[i];
  if (n == 0 || n > kMaxHeader || n > file_size - 8 || head[8] != '{') return {};
  return n;
}

// One rank's share of a tensor-parallel load (see the file comment); ranks == 1: everything.
struct Rank {
  int index = 0;
  int ranks = 1;
};

enum class Split { kWhole, kDim0, kDim1 };

Split SplitOf(const std::string& name, size_t dims) {
  if (dims != 2) return Split::kWhole;
  auto has = [&](const char* part) { return name.find(part) != std::string::npos; };
  if (has("o_proj.") || has("down_proj.")) return Split::kDim1;
  if (has("q_proj.") || has("k_proj.") || has("v_proj.") || has("qkv_proj.") || has("gate_proj.") ||
      has("up_proj.") || has("gate_up_proj.") || has("embed_tokens.") || has("lm_head.")) {
    return Split::kDim0;
  }
  return Split::kWhole;
}

size_t ElementBytes(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  return 1;
}

// A tensor's bytes within the data section and how a rank reads them.
struct TensorSpan {
  uint64_t begin = 0, end = 0;
  Split split = Split::kWhole;
  uint64_t rows = 0, row_bytes = 0;  // for a split: dim 0 and the bytes of one row
  uint64_t elem = 1;                 // bytes of one element
};

// [first, last) of `n` items for rank r of N (the first n % N ranks get one more).
std::pair<uint64_t, uint64_t> ShareOf(uint64_t n, const Rank& r) {
  const uint64_t base = n / static_cast<uint64_t>(r.ranks);
  const uint64_t extra = n % static_cast<uint64_t>(r.ranks);
  const uint64_t i = static_cast<uint64_t>(r.index);
  const uint64_t first = i * base + std::min(i, extra);
  return {first, first + base + (i < extra ? 1 : 0)};
}

// Copies the rank's share of one tensor from `src` (its first byte) into `copy`.
uint64_t CopyShare(const char* src, const TensorSpan& ts, const Rank& r, std::vector<char>& copy,
                   Totals& t) {
  const uint64_t size = ts.end - ts.begin;
  uint64_t n = 0;
  if (r.ranks == 1 || ts.split == Split::kWhole || ts.rows == 0) {
    if (copy.size() < size) copy.resize(size);
    memcpy(copy.data(), src, size);
    n = size;
  } else if (ts.split == Split::kDim0) {
    auto [first, last] = ShareOf(ts.rows, r);
    n = (last - first) * ts.row_bytes;
    if (copy.size() < n) copy.resize(n);
    memcpy(copy.data(), src + first * ts.row_bytes, n);
  } else {
    // Columns of every row: the row's bytes split like its elements.
    auto [first, last] = ShareOf(ts.row_bytes / ts.elem, r);
    const uint64_t piece = (last - first) * ts.elem;
    n = piece * ts.rows;
    if (copy.size() < n) copy.resize(n);
    for (uint64_t row = 0; row < ts.rows; ++row) {
      memcpy(copy.data() + row * piece, src + row * ts.row_bytes + first * ts.elem, piece);
    }
  }
  if (n > 0) t.checksum ^= static_cast<uint8_t>(copy[n - 1]);
  return n;
}

// Copies each tensor (or the rank's share of it) out of a private read-only mapping of the
// file, in offset order.
bool LoadMapped(const std::string& path, int fd, uint64_t file_size, uint64_t header_len,
                const Rank& rank, std::vector<char>& copy, Totals& t) {
  void* map = mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) return FailErrno(path, "mmap");
  const char* base = static_cast<const char*>(map);
  struct Unmap {
    void* p;
    size_t n;
    ~Unmap() { munmap(p, n); }
  } unmap{map, file_size};

  // The header is parsed from the mapping too, as safetensors does.
  auto header = nlohmann::json::parse(base + 8, base + 8 + header_len, nullptr, false);
  if (header.is_discarded() || !header.is_object())
    return Fail(path, "header is not a JSON object");
  t.bytes += 8 + header_len;
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = file_size - data_start;
  std::vector<TensorSpan> spans;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const auto it = info.is_object() ? info.find("data_offsets") : info.end();
    if (it == info.end() || !it->is_array() || it->size() != 2 || !(*it)[0].is_number_unsigned() ||
        !(*it)[1].is_number_unsigned()) {
      return Fail(path, "tensor " + name + ": no data_offsets [begin, end]");
    }
    TensorSpan ts;
    ts.begin = (*it)[0].get<uint64_t>();
    ts.end = (*it)[1].get<uint64_t>();
    if (ts.begin > ts.end || ts.end > data_size) {
      return Fail(path, "tensor " + name + ": data_offsets out of range");
    }
    const auto shape = info.find("shape");
    const auto dtype = info.find("dtype");
    if (shape != info.end() && shape->is_array() && dtype != info.end() && dtype->is_string()) {
      ts.split = SplitOf(name, shape->size());
      ts.elem = ElementBytes(dtype->get<std::string>());
      if (ts.split != Split::kWhole && (*shape)[0].is_number_unsigned() &&
          (*shape)[1].is_number_unsigned()) {
        ts.rows = (*shape)[0].get<uint64_t>();
        ts.row_bytes = (*shape)[1].get<uint64_t>() * ts.elem;
        if (ts.rows * ts.row_bytes != ts.end - ts.begin) ts.split = Split::kWhole;
      } else {
        ts.split = Split::kWhole;
      }
    }
    spans.push_back(ts);
  }
  std::sort(spans.begin(), spans.end(),
            [](const TensorSpan& a, const TensorSpan& b) { return a.begin < b.begin; });
  for (const TensorSpan& ts : spans) {
    if (ts.end == ts.begin) continue;
    t.bytes += CopyShare(base + data_start + ts.begin, ts, rank, copy, t);
    t.tensors += 1;
  }
  return true;
}

bool LoadFile(const std::string& path, bool mmap_mode, const Rank& rank, std::vector<char>& buf,
              std::vector<char>& copy, Totals& t) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return FailErrno(path, "open");
  if (mmap_mode) {
    struct stat st;
    if (fstat(fd.get(), &st) != 0) return FailErrno(path, "fstat");
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (auto header_len = SafetensorsHeaderLength(fd.get(), size)) {
      return LoadMapped(path, fd.get(), size, *header_len, rank, copy, t);
    }
  }
  return ReadWhole(path, fd.get(), buf, t);
}

int Usage() {
  fprintf(stderr, "usage: modelfs-load --mode mmap|read [--ranks N] [--json] FILE...\n");
  return 2;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// What a rank process reports to the parent through its pipe.
struct RankResult {
  uint64_t bytes = 0;
  uint64_t tensors = 0;
  double seconds = 0;
  uint8_t checksum = 0;
  bool ok = false;
};

// Loads every file as `rank` into `t`; false on the first failure (named on stderr).
bool LoadAll(const std::vector<std::string>& files, bool mmap_mode, const Rank& rank, Totals& t) {
  std::vector<char> buf(kReadChunk);
  std::vector<char> copy;
  for (const std::string& f : files) {
    if (!LoadFile(f, mmap_mode, rank, buf, copy, t)) return false;
  }
  return true;
}

// Forks one process per rank, all started before any loads; each reports through a pipe.
// Returns the ranks' results in rank order (ok = false for a rank that failed or died).
std::vector<RankResult> RunRanks(const std::vector<std::string>& files, int ranks,
                                 std::chrono::steady_clock::time_point start) {
  std::vector<RankResult> results(static_cast<size_t>(ranks));
  std::vector<std::pair<pid_t, int>> children;
  for (int r = 0; r < ranks; ++r) {
    int fds[2];
    if (pipe(fds) != 0) {
      perror("modelfs-load: pipe");
      break;
    }
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      Totals t;
      RankResult out;
      out.ok = LoadAll(files, /*mmap_mode=*/true, Rank{r, ranks}, t);
      out.seconds = SecondsSince(start);
      out.bytes = t.bytes;
      out.tensors = t.tensors;
      out.checksum = t.checksum;
      const bool sent = write(fds[1], &out, sizeof out) == static_cast<ssize_t>(sizeof out);
      _exit(out.ok && sent ? 0 : 1);
    }
    close(fds[1]);
    if (pid < 0) {
      perror("modelfs-load: fork");
      close(fds[0]);
      break;
    }
    children.emplace_back(pid, fds[0]);
  }
  for (size_t i = 0; i < children.size(); ++i) {
    RankResult got;
    if (read(children[i].second, &got, sizeof got) == static_cast<ssize_t>(sizeof got)) {
      results[i] = got;
    }
    close(children[i].second);
    int status = 0;
    waitpid(children[i].first, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) results[i].ok = false;
  }
  return results;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode;
  int ranks = 1;
  bool json = false;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--mode" && i + 1 < argc) {
      mode = argv[++i];
    } else if (a.rfind("--mode=", 0) == 0) {
      mode = a.substr(7);
    } else if (a == "--ranks" && i + 1 < argc) {
      ranks = std::atoi(argv[++i]);
    } else if (a == "--json") {
      json = true;
    } else if (a == "-h" || a == "--help") {
      Usage();
      return 0;
    } else if (a.rfind("--", 0) == 0) {
      return Usage();
    } else {
      files.push_back(a);
    }
  }
  if ((mode != "mmap" && mode != "read") || files.empty()) return Usage();
  if (ranks < 1 || ranks > 256 || (ranks > 1 && mode != "mmap")) {
    fprintf(stderr, "modelfs-load: --ranks takes 1..256, and more than 1 only with --mode mmap\n");
    return 2;
  }
  const bool mmap_mode = mode == "mmap";

  Totals t;
  const auto start = std::chrono::steady_clock::now();
  std::vector<double> rank_seconds;
  if (ranks == 1) {
    if (!LoadAll(files, mmap_mode, Rank{}, t)) return 1;
  } else {
    for (const RankResult& r : RunRanks(files, ranks, start)) {
      if (!r.ok) return 1;
      t.bytes += r.bytes;
      t.tensors += r.tensors;
      t.checksum ^= r.checksum;
      rank_seconds.push_back(r.seconds);
    }
  }
  const double seconds = SecondsSince(start);
  if (json) {
    nlohmann::json out = {{"mode", mode},          {"ranks", ranks},       {"files", files.size()},
                          {"bytes", t.bytes},      {"tensors", t.tensors}, {"seconds", seconds},
                          {"checksum", t.checksum}};
    if (!rank_seconds.empty()) out["rank_seconds"] = rank_seconds;
    printf("%s\n", out.dump().c_str());
  } else if (ranks > 1) {
    printf(
        "%s, %d ranks: %zu files, %llu bytes in all (%llu tensor slices), last rank done in "
        "%.3f s\n",
        mode.c_str(), ranks, files.size(), static_cast<unsigned long long>(t.bytes),
        static_cast<unsigned long long>(t.tensors), seconds);
  } else {
    printf("%s: %zu files, %llu bytes (%llu tensors) in %.3f s, %.0f MB/s\n", mode.c_str(),
           files.size(), static_cast<unsigned long long>(t.bytes),
           static_cast<unsigned long long>(t.tensors), seconds,
           seconds > 0 ? static_cast<double>(t.bytes) / seconds / 1e6 : 0.0);
  }
  return 0;
}
