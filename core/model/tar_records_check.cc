// TarRecordsCheck, UsedRanges and GatedBlobReader (tar_records_check.h).
#include "core/model/tar_records_check.h"

#include <algorithm>
#include <atomic>
#include <iterator>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/status/status_macros.h"

namespace modelfs {

std::vector<std::pair<uint64_t, uint64_t>> UsedRanges::Merged() const {
  std::vector<std::pair<uint64_t, uint64_t>> sorted = ranges_;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (const auto& [offset, length] : sorted) {
    if (!out.empty() && offset <= out.back().first + out.back().second) {
      const uint64_t end = std::max(out.back().first + out.back().second, offset + length);
      out.back().second = end - out.back().first;
    } else {
      out.emplace_back(offset, length);
    }
  }
  return out;
}

TarRecordsCheck::TarRecordsCheck(
    BlobReader* reader, std::string model, std::vector<Tar> tars,
    std::function<void(const std::string& model, const absl::Status&)> on_checked)
    : reader_(reader),
      model_(std::move(model)),
      tars_(std::move(tars)),
      on_checked_(std::move(on_checked)) {}

TarRecordsCheck::~TarRecordsCheck() {
  std::thread background;
  {
    absl::MutexLock lock(&mu_);
    background = std::move(background_);
  }
  if (background.joinable()) background.join();
}

void TarRecordsCheck::StartInBackground() {
  absl::MutexLock lock(&mu_);
  if (state_ != State::kIdle || background_.joinable()) return;
  state_ = State::kRunning;
  background_ = std::thread([this] { RunAndPublish(); });
}

absl::Status TarRecordsCheck::Wait() {
  {
    absl::MutexLock lock(&mu_);
    if (state_ == State::kDone) return result_;
    if (state_ == State::kRunning) {
      const uint64_t run = finished_runs_;
      auto finished = [this, run]()
                          ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return finished_runs_ > run; };
      mu_.Await(absl::Condition(&finished));
      return last_result_;
    }
    state_ = State::kRunning;
  }
  RunAndPublish();
  absl::MutexLock lock(&mu_);
  return last_result_;
}

bool TarRecordsCheck::Passed() const {
  absl::MutexLock lock(&mu_);
  return state_ == State::kDone && result_.ok();
}

void TarRecordsCheck::RunAndPublish() {
  absl::Status result = Run();
  // A verdict sticks: the records match, or they (or the layer's verified bytes) do not. Not
  // being able to read the layer (a registry down, a deadline) is no verdict: the next read
  // runs the check again.
  const bool verdict = result.ok() || absl::IsDataLoss(result);
  {
    absl::MutexLock lock(&mu_);
    last_result_ = result;
    ++finished_runs_;
    if (verdict) result_ = result;
    state_ = verdict ? State::kDone : State::kIdle;
  }
  if (verdict && on_checked_) on_checked_(model_, result);
}

absl::Status TarRecordsCheck::Run() const {
  // The ranges of every tar, checked side by side (each lies in its own chunk of a layer,
  // which in a compressed layer means decoding a span): the first failure in layer and offset
  // order is the one reported, whichever thread found it.
  struct Item {
    size_t tar;
    uint64_t offset;
    uint64_t length;
  };
  std::vector<Item> items;
  for (size_t t = 0; t < tars_.size(); ++t) {
    for (const auto& [offset, length] : tars_[t].ranges) items.push_back({t, offset, length});
  }
  constexpr size_t kParallel = 8;
  std::atomic<size_t> next{0};
  absl::Mutex mu;
  size_t first_failed = std::numeric_limits<size_t>::max();
  absl::Status failure;
  auto work = [&] {
    for (size_t i = next++; i < items.size(); i = next++) {
      {
        absl::MutexLock lock(&mu);
        if (i > first_failed) return;
      }
      absl::Status st = CheckRange(tars_[items[i].tar], items[i].offset, items[i].length);
      if (st.ok()) continue;
      absl::MutexLock lock(&mu);
      if (i < first_failed) {
        first_failed = i;
        failure = std::move(st);
      }
    }
  };
  std::vector<std::thread> workers;
  for (size_t w = 1; w < std::min(kParallel, items.size()); ++w) workers.emplace_back(work);
  work();
  for (std::thread& t : workers) t.join();
  return failure;
}

absl::Status TarRecordsCheck::CheckRange(const Tar& tar, uint64_t offset, uint64_t length) const {
  // The entry whose header blocks (or, past the last one, the end-of-archive block) hold `at`.
  auto entry_at = [&](uint64_t at) -> std::string {
    auto it = std::partition_point(tar.entries.begin(), tar.entries.end(),
                                   [&](const TarEntry& e) { return e.header_offset <= at; });
    if (it == tar.entries.begin()) return "the first entry";
    const TarEntry& e = *std::prev(it);
    if (std::next(std::prev(it)) == tar.entries.end() && at >= e.data_offset + e.size) {
      return absl::StrCat("the end of the archive, after entry '", e.path, "'");
    }
    return absl::StrCat("entry '", e.path, "'");
  };
  const std::string where = absl::StrCat("model ", model_, ": ", tar.name, " (", tar.blob.str(),
                                         "): the volume image's tar header records");
  std::unique_ptr<RangeReader> recorded = MakeTarHeadersReader(tar.headers, tar.name);
  ASSIGN_OR_RETURN(const std::string expected, recorded->ReadAt(offset, length));
  absl::StatusOr<std::string> got = reader_->Read(tar.blob, offset, length);
  if (!got.ok()) {
    return absl::Status(got.status().code(),
                        absl::StrCat(where, " cannot be checked at offset ", offset, " (",
                                     entry_at(offset), "): ", got.status().message()));
  }
  if (*got == expected) return absl::OkStatus();
  size_t i = 0;
  while (i < got->size() && (*got)[i] == expected[i]) ++i;
  if (i == got->size()) {
    return absl::DataLossError(absl::StrCat(where, " pass the layer's end at offset ", offset + i,
                                            " (", entry_at(offset + i), ")"));
  }
  return absl::DataLossError(absl::StrCat(where, " do not match the layer at offset ", offset + i,
                                          " (", entry_at(offset + i),
                                          "): no byte of the model is served"));
}

absl::StatusOr<std::string> GatedBlobReader::Read(const Digest& digest, uint64_t offset,
                                                  uint64_t length) {
  RETURN_IF_ERROR(gate_->Wait());
  return inner_->Read(digest, offset, length);
}

absl::StatusOr<std::vector<BlobSpan>> GatedBlobReader::ReadSpans(const Digest& digest,
                                                                 uint64_t offset, uint64_t length) {
  RETURN_IF_ERROR(gate_->Wait());
  return inner_->ReadSpans(digest, offset, length);
}

bool GatedBlobReader::IsReady(const Digest& digest, uint64_t offset, uint64_t length) {
  return gate_->Passed() && inner_->IsReady(digest, offset, length);
}

}  // namespace modelfs
