// The memory report of `modelfs memory` as JSON and as text (memory_render.h).
#include "cmd/modelfs/memory_render.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/text/escape.h"
#include "core/text/number_format.h"

namespace modelfs::cli {
namespace {

using nlohmann::json;

constexpr long double kGiB = 1024.0L * 1024.0L * 1024.0L;

std::string ReportBytes(uint64_t b) {
  long double v = b;
  if (v >= kGiB) return absl::StrFormat("%.2f GiB", static_cast<double>(v / kGiB));
  if (v >= 1024.0L * 1024.0L) {
    return absl::StrFormat("%.1f MiB", static_cast<double>(v / (1024.0L * 1024.0L)));
  }
  if (v >= 1024.0L) return absl::StrFormat("%.1f KiB", static_cast<double>(v / 1024.0L));
  return absl::StrCat(b, " bytes");
}

std::string ReportCount(uint64_t n) {
  if (n >= 1000000000ULL) return absl::StrFormat("%.2fB", n / 1e9);
  if (n >= 1000000ULL) return absl::StrFormat("%.1fM", n / 1e6);
  if (n >= 1000ULL) return absl::StrFormat("%.1fK", n / 1e3);
  return absl::StrCat(n);
}

// "32 layers x 8 KV heads x (128 + 128) dims", or the MLA / mixed-heads equivalent.
std::string KvFormula(const ModelShape& s) {
  if (s.mla) {
    return absl::StrCat(s.attention_layers, " layers x ", s.mla_kv_dim,
                        " latent dims (MLA: kv_lora_rank ", s.kv_lora_rank, " + rope ",
                        s.rope_head_dim, ")");
  }
  uint64_t lo = std::numeric_limits<uint64_t>::max(), hi = 0;
  for (uint64_t i = 0; i < s.layers; ++i) {
    uint64_t h = s.KvHeadsOfLayer(i);
    if (h == 0) continue;
    lo = std::min(lo, h);
    hi = std::max(hi, h);
  }
  std::string layers = s.attention_layers == s.layers
                           ? absl::StrCat(s.layers, " layers")
                           : absl::StrCat(s.attention_layers, " of ", s.layers, " layers");
  std::string heads = (lo == hi || hi == 0) ? absl::StrCat(hi, " KV heads")
                                            : absl::StrCat(lo, "-", hi, " KV heads");
  return absl::StrCat(layers, " x ", heads, " x (", s.head_dim_k, " + ", s.head_dim_v, ") dims");
}

}  // namespace

nlohmann::json MemoryReportToJson(const MemoryReport& r) {
  json j;
  j["shape"] = ModelShapeToJson(r.shape);
  j["params"] = r.params.has_value() ? json(*r.params) : json(nullptr);
  j["ctx"] = r.ctx;
  j["seqs"] = r.seqs;
  json weights = json::array();
  for (const WeightEstimate& w : r.weights) {
    weights.push_back({{"format", w.format},
                       {"bytes", w.bytes},
                       {"bits_per_weight",
                        w.bits_per_weight.has_value() ? json(*w.bits_per_weight) : json(nullptr)},
                       {"source", w.from_file ? "file" : "params"}});
  }
  j["weights"] = std::move(weights);
  json kv = json::array();
  for (const KvEstimate& e : r.kv) {
    json k = {{"kv_type", e.kv_type},
              {"bytes_per_token", e.bytes_per_token},
              {"bytes_per_sequence", e.bytes_per_sequence},
              {"bytes", e.bytes}};
    k["windowed_bytes_per_sequence"] = e.windowed_bytes_per_sequence.has_value()
                                           ? json(*e.windowed_bytes_per_sequence)
                                           : json(nullptr);
    k["windowed_bytes"] = e.windowed_bytes.has_value() ? json(*e.windowed_bytes) : json(nullptr);
    kv.push_back(std::move(k));
  }
  j["kv_cache"] = std::move(kv);
  if (r.gpu_gib.has_value()) {
    json fits = json::array();
    for (const FitEstimate& f : r.fits) {
      json x = {{"weights", f.weights},
                {"kv_type", f.kv_type},
                {"weight_bytes", f.weight_bytes},
                {"weights_fit", f.weights_fit},
                {"kv_budget_bytes", f.kv_budget_bytes},
                {"tokens", f.tokens},
                {"sequences", f.sequences},
                {"request_fits", f.request_fits}};
      x["windowed_sequences"] =
          f.windowed_sequences.has_value() ? json(*f.windowed_sequences) : json(nullptr);
      fits.push_back(std::move(x));
    }
    j["gpu"] = {{"gib", *r.gpu_gib},
                {"utilization", r.utilization},
                {"usable_bytes", r.gpu_usable_bytes},
                {"fits", std::move(fits)}};
  } else {
    j["gpu"] = nullptr;
  }
  j["notes"] = r.notes;
  return j;
}

std::string RenderMemoryReport(const MemoryReport& r) {
  const ModelShape& s = r.shape;
  std::string out;
  // The architecture and notes come from the model's files: escaped, one line each.
  absl::StrAppend(&out, "shape ",
                  s.architecture.empty() ? "model" : EscapeUntrusted(s.architecture), ": ",
                  s.layers, " layers");
  if (s.attention_layers != s.layers)
    absl::StrAppend(&out, " (", s.attention_layers, " with KV cache)");
  absl::StrAppend(&out, ", ", s.heads, " heads, ", s.kv_heads, " KV heads, head dim ",
                  s.head_dim_k);
  if (s.head_dim_v != s.head_dim_k) absl::StrAppend(&out, "/", s.head_dim_v);
  absl::StrAppend(&out, ", hidden ", WithCommas(s.hidden));
  if (s.context != 0) absl::StrAppend(&out, ", context ", WithCommas(s.context));
  if (s.vocab != 0) absl::StrAppend(&out, ", vocab ", WithCommas(s.vocab));
  if (s.sliding_window.has_value()) {
    absl::StrAppend(&out, ", sliding window ", WithCommas(*s.sliding_window));
  }
  out += "\n";
  if (r.params.has_value()) {
    absl::StrAppend(&out, "params ", WithCommas(*r.params), " (", ReportCount(*r.params), ")\n");
  }
  for (const WeightEstimate& w : r.weights) {
    absl::StrAppend(&out, absl::StrFormat("%-8s %15s %10s", w.format, WithCommas(w.bytes),
                                          ReportBytes(w.bytes)));
    if (w.bits_per_weight.has_value()) {
      absl::StrAppend(&out, absl::StrFormat(" %.2f bits/weight", *w.bits_per_weight));
    }
    if (w.from_file) absl::StrAppend(&out, " (exact, from the file)");
    out += "\n";
  }
  for (const KvEstimate& e : r.kv) {
    absl::StrAppend(&out, "kv cache ", e.kv_type, ": ", KvFormula(s), " = ",
                    WithCommas(e.bytes_per_token), " bytes/token\n");
    absl::StrAppend(&out, "  ", WithCommas(r.ctx), " tokens x ", r.seqs,
                    " sequence(s) = ", WithCommas(e.bytes), " bytes (", ReportBytes(e.bytes),
                    ")\n");
    if (e.windowed_bytes.has_value()) {
      absl::StrAppend(&out, "  with the ", WithCommas(*s.sliding_window), "-token window on ",
                      s.SlidingLayers(), " layers: ", WithCommas(*e.windowed_bytes), " bytes (",
                      ReportBytes(*e.windowed_bytes), ")\n");
    }
  }
  if (r.gpu_gib.has_value()) {
    std::string gpu = absl::StrFormat("gpu %.1f GiB x %g", *r.gpu_gib, r.utilization);
    auto fit_line = [&](const FitEstimate& f) {
      std::string line;
      if (!f.weights_fit) {
        return absl::StrCat("weights (", ReportBytes(f.weight_bytes), ") do not fit");
      }
      absl::StrAppend(&line, ReportBytes(f.kv_budget_bytes),
                      " left for KV = ", WithCommas(f.tokens),
                      " tokens = ", WithCommas(f.sequences), " sequence(s) of ", WithCommas(r.ctx));
      if (f.windowed_sequences.has_value()) {
        absl::StrAppend(&line, " (", WithCommas(*f.windowed_sequences), " with the window)");
      }
      if (!f.request_fits) absl::StrAppend(&line, "; ", r.seqs, " requested do not fit");
      return line;
    };
    if (r.fits.size() == 1) {
      absl::StrAppend(&out, gpu, ": ", fit_line(r.fits[0]), "\n");
    } else {
      absl::StrAppend(&out, gpu, " = ", WithCommas(r.gpu_usable_bytes), " bytes usable\n");
      for (const FitEstimate& f : r.fits) {
        absl::StrAppend(&out, "  ", f.weights, " + ", f.kv_type, " cache: ", fit_line(f), "\n");
      }
    }
  }
  for (const std::string& n : r.notes) absl::StrAppend(&out, "note: ", EscapeUntrusted(n), "\n");
  return out;
}

}  // namespace modelfs::cli
