// The four consumers of TarFollower over the same bytes, and whether they agree: ScanTarHeaders
// (paths raw and checked), TarHeaderRecorder (then ScanTarHeaders over its records),
// TarSplitWriter (into a directory) and TarTensorIndexer. For tests/oci/tar_consumers_test.cc and
// tests/fuzz/tar_consumers_fuzz.cc.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/cache/layer_store.h"
#include "core/cache/tar_split_writer.h"
#include "core/formats/model_inspect.h"
#include "core/oci/path_safety.h"
#include "core/oci/tar.h"
#include "core/oci/tar_headers.h"
#include "core/publish/tar_tensor_indexer.h"

namespace modelfs::testing {

struct TarConsumerOutcomes {
  absl::StatusOr<std::vector<TarEntry>> scan_raw = absl::UnknownError("not run");  // no path checks
  absl::StatusOr<std::vector<TarEntry>> scan = absl::UnknownError("not run");      // path checks
  uint64_t scan_used_bytes = 0;  // what the checked scan read (on_bytes_used)
  std::optional<TarHeaders> records;
  absl::StatusOr<std::vector<TarEntry>> from_records = absl::UnknownError("no records");
  std::vector<std::pair<uint64_t, uint64_t>> members;  // TarSplitWriter: (offset, length)
  std::string split_stopped;
  std::string split_bytes;  // data file and member files put together again
  absl::Status split_status;
  absl::Status indexer_feed;  // a weight member's error (the indexer then stops)
  std::optional<TarTensorIndexes> indexes;
  std::string indexer_stopped;
};

// Runs every consumer over `tar`, the streaming ones fed in pieces of `piece` bytes; the split
// writer writes under `dir` (which must exist), members from `member_min` bytes.
inline TarConsumerOutcomes RunTarConsumers(std::string_view tar, size_t piece,
                                           const std::filesystem::path& dir, uint64_t member_min) {
  TarConsumerOutcomes out;
  TarReadOptions raw;
  raw.check_paths = false;
  out.scan_raw = IndexTarBytes(tar, raw);
  TarReadOptions checked;
  checked.on_bytes_used = [&out](uint64_t, uint64_t n) { out.scan_used_bytes += n; };
  out.scan = IndexTarBytes(tar, checked);

  TarHeaderRecorder recorder;
  TarTensorIndexer indexer("layer under test");
  const std::string data_path = (dir / "tar.data").string();
  const int fd = open(data_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  LayerStore store(dir.string(), nullptr);
  auto split = std::make_unique<TarSplitWriter>(store, fd, data_path, (dir / "members").string(),
                                                member_min, "no space");
  for (size_t at = 0; at < tar.size(); at += piece) {
    const std::string_view bytes = tar.substr(at, piece);
    recorder.Feed(bytes);
    if (out.indexer_feed.ok()) out.indexer_feed = indexer.Feed(bytes);
    if (out.split_status.ok()) out.split_status = split->Write(bytes);
  }
  const Digest digest = Digest::Of(tar);
  out.records = recorder.Finish(digest, "records under test");
  if (out.records) {
    std::unique_ptr<RangeReader> r =
        MakeTarHeadersReader(std::make_shared<const TarHeaders>(*out.records), "records");
    out.from_records = IndexTar(*r);
  }
  if (out.indexer_feed.ok()) out.indexes = indexer.Finish(digest);
  out.indexer_stopped = indexer.stopped();

  absl::StatusOr<std::vector<LayerSegments::File>> files = split->Finish();
  out.split_stopped = split->stopped();
  if (!files.ok()) out.split_status = files.status();
  out.split_bytes.assign(tar.size(), '\0');
  if (pread(fd, out.split_bytes.data(), tar.size(), 0) != static_cast<ssize_t>(tar.size())) {
    out.split_status = absl::InternalError("short read of the data file");
  }
  for (const LayerSegments::File& m : files.ok() ? *files : std::vector<LayerSegments::File>()) {
    out.members.emplace_back(m.offset, m.length);
    std::string bytes(m.length, '\0');
    const ssize_t n = pread(m.fd, bytes.data(), m.length, 0);
    if (n >= 0) out.split_bytes.replace(m.offset, static_cast<size_t>(n), bytes, 0, n);
    close(m.fd);
  }
  close(fd);
  split.reset();
  std::error_code ec;
  std::filesystem::remove_all(dir / "members", ec);
  std::filesystem::remove(data_path, ec);
  return out;
}

inline bool SameTarEntry(const TarEntry& a, const TarEntry& b) {
  return a.path == b.path && a.type == b.type && a.typeflag == b.typeflag && a.size == b.size &&
         a.header_offset == b.header_offset && a.data_offset == b.data_offset &&
         a.linkname == b.linkname && a.mode == b.mode && a.uid == b.uid && a.gid == b.gid &&
         a.mtime == b.mtime && a.mtime_nsec == b.mtime_nsec && a.devmajor == b.devmajor &&
         a.devminor == b.devminor && a.xattrs == b.xattrs;
}

// "" when the consumers agree on `tar`: the same entries (or all refuse), the records index
// to what the tar does, the members are the regular files of member_min bytes and up, the
// split puts every byte back, and the tensor indexes name weight members at their offsets.
// Else what differs.
inline std::string TarConsumersDisagree(const TarConsumerOutcomes& o, std::string_view tar,
                                        uint64_t member_min) {
  const bool followed = o.scan_raw.ok();
  // The recorder: records exactly when the checked scan succeeds (and they fit the budget).
  const bool fits = o.scan_used_bytes <= TarHeaders::kMaxBytes;
  if (o.records.has_value() != (o.scan.ok() && fits)) {
    return absl::StrCat("recorder gave ", o.records ? "records" : "none",
                        ", checked scan: ", o.scan.status().ToString());
  }
  if (o.records) {
    if (!o.from_records.ok()) return "records do not index";
    if (o.from_records->size() != o.scan->size()) return "records index to other entries";
    for (size_t i = 0; i < o.scan->size(); ++i) {
      if (!SameTarEntry((*o.from_records)[i], (*o.scan)[i])) {
        return absl::StrCat("records differ at entry ", i, " (", (*o.scan)[i].path, ")");
      }
    }
    if (o.records->tar_size != tar.size() || o.records->entries != o.scan->size()) {
      return "records count other bytes or entries";
    }
  }
  // The split writer: the tar's bytes whatever happens; members while followed.
  if (!o.split_status.ok()) return absl::StrCat("split failed: ", o.split_status.ToString());
  if (o.split_bytes != tar) return "split bytes differ from the tar";
  if (o.split_stopped.empty() != followed) {
    return absl::StrCat("split stopped '", o.split_stopped,
                        "', raw scan: ", o.scan_raw.status().ToString());
  }
  if (followed) {
    std::vector<std::pair<uint64_t, uint64_t>> want;
    for (const TarEntry& e : *o.scan_raw) {
      if (e.type == TarEntryType::kFile && e.size > 0 && e.size >= member_min) {
        want.emplace_back(e.data_offset, e.size);
      }
    }
    if (want != o.members) return "split members differ from the regular files";
  }
  // The tensor indexer (unless a weight member's own bytes stopped it).
  if (o.indexer_feed.ok()) {
    if (o.indexes.has_value() != followed) {
      return absl::StrCat("indexer stopped '", o.indexer_stopped,
                          "', raw scan: ", o.scan_raw.status().ToString());
    }
    if (followed) {
      std::map<std::string, const TarEntry*> weights;  // the last member of a path
      for (const TarEntry& e : *o.scan_raw) {
        const SniffedFormat f = SniffFormat(e.path, "");
        if (e.type != TarEntryType::kFile ||
            (f != SniffedFormat::kSafetensors && f != SniffedFormat::kGguf)) {
          continue;
        }
        absl::StatusOr<std::string> norm = NormalizeRelativePath(e.path);
        if (!norm.ok()) return "indexer took an unsafe weight path";
        weights[*norm] = &e;
      }
      if (weights.size() != o.indexes->files.size()) return "indexer missed weight members";
      for (const TarTensorIndex& t : o.indexes->files) {
        auto it = weights.find(t.file);
        if (it == weights.end() || it->second->data_offset != t.index.file_offset ||
            it->second->size != t.index.file_size) {
          return absl::StrCat("indexer's ", t.file, " is not the tar's");
        }
      }
    }
  }
  return "";
}

}  // namespace modelfs::testing
