// The inspection summary of `modelfs inspect` as JSON and as text (inspect_render.h).
#include "cmd/modelfs/inspect_render.h"

#include <algorithm>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/text/base_name.h"
#include "core/text/escape.h"
#include "core/text/number_format.h"

namespace modelfs::cli {

namespace {
nlohmann::json DtypesToJson(const std::map<std::string, DtypeTotals>& by_dtype) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : by_dtype) {
    j[k] = {{"tensors", v.tensors}, {"parameters", v.parameters}, {"bytes", v.bytes}};
  }
  return j;
}
}  // namespace

nlohmann::json InspectedFileToJson(const InspectedFile& f, bool with_tensors) {
  nlohmann::json j = {
      {"location", f.location},
      {"format", f.format},
      {"file_size", f.file_size},
      {"header_bytes", f.header_bytes},
      {"tensor_bytes", f.tensor_bytes},
      {"padding_bytes", f.padding_bytes},
      {"parameters", f.parameters},
      {"tensor_count", f.tensor_count},
      {"dtypes", DtypesToJson(f.by_dtype)},
      {"precision", f.precision},
      {"quantization", f.quantization},
      {"metadata_count", f.metadata_count},
      {"read", {{"requests", f.read_stats.requests}, {"bytes", f.read_stats.bytes}}},
      {"warnings", f.warnings},
  };
  if (f.format == "gguf") {
    j["gguf_version"] = f.gguf_version;
    j["architecture"] = f.architecture;
    j["name"] = f.model_name;
    j["file_type"] = f.file_type;
  }
  j["metadata"] = f.metadata;
  if (f.shape) j["shape"] = ModelShapeToJson(*f.shape);
  if (f.sharded) {
    nlohmann::json shards = nlohmann::json::array();
    for (const auto& s : f.sharded->shards) {
      shards.push_back({{"file", s.file},
                        {"file_size", s.file_size},
                        {"tensors", s.tensors},
                        {"parameters", s.parameters},
                        {"tensor_bytes", s.tensor_bytes}});
    }
    j["shards"] = shards;
    j["declared_total_size"] = f.sharded->declared_total_size
                                   ? nlohmann::json(*f.sharded->declared_total_size)
                                   : nlohmann::json(nullptr);
  }
  if (with_tensors) {
    nlohmann::json ts = nlohmann::json::array();
    for (const auto& t : f.tensors) {
      ts.push_back({{"name", t.name},
                    {"dtype", t.dtype},
                    {"shape", t.shape},
                    {"parameters", t.elements},
                    {"bytes", t.bytes},
                    {"offset", t.offset}});
    }
    j["tensors"] = ts;
  }
  return j;
}

nlohmann::json InspectedModelToJson(const InspectedModel& m, bool with_tensors) {
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : m.files) files.push_back(InspectedFileToJson(f, with_tensors));
  nlohmann::json j = {{"format", m.format},
                      {"parameters", m.parameters},
                      {"tensor_bytes", m.tensor_bytes},
                      {"dtypes", DtypesToJson(m.by_dtype)},
                      {"precision", m.precision},
                      {"quantization", m.quantization},
                      {"architecture", m.architecture},
                      {"files", files},
                      {"warnings", m.warnings}};
  j["shape"] = m.shape ? ModelShapeToJson(*m.shape) : nlohmann::json(nullptr);
  return j;
}

std::string RenderInspectedFile(const InspectedFile& f, bool with_tensors) {
  // Names, metadata strings and warnings come from the file: escaped so none can forge a line
  // or drive the terminal.
  std::ostringstream out;
  std::string name = EscapeUntrusted(LocationBaseName(f.location));
  if (f.format == "gguf") {
    out << name << ": GGUF v" << f.gguf_version << ", " << f.metadata_count << " metadata keys, "
        << WithCommas(f.tensor_count) << " tensors, data at byte " << WithCommas(f.header_bytes)
        << "\n";
    out << "model " << (f.architecture.empty() ? "?" : EscapeUntrusted(f.architecture));
    if (!f.model_name.empty()) out << " '" << EscapeUntrusted(f.model_name) << "'";
    if (!f.file_type.empty()) out << ", file type " << EscapeUntrusted(f.file_type);
    out << "\n";
  } else if (f.format == "safetensors-index") {
    out << name << ": sharded safetensors, " << f.sharded->shards.size() << " shards, "
        << WithCommas(f.tensor_count) << " tensors\n";
  } else {
    out << name << ": safetensors, header " << WithCommas(f.header_bytes) << " bytes, "
        << WithCommas(f.tensor_count) << " tensors, " << f.metadata_count << " metadata entries\n";
  }
  if (f.shape) {
    const ModelShape& s = *f.shape;
    out << "shape " << s.layers << " layers, embedding " << s.hidden << ", " << s.heads
        << " heads, " << s.kv_heads << " KV heads, head dim " << s.head_dim_k;
    if (s.context) out << ", context " << WithCommas(s.context);
    if (s.vocab) out << ", vocab " << WithCommas(s.vocab);
    out << "\n";
  }
  out << "params " << WithCommas(f.parameters) << absl::StrFormat(" (%.1fM)", f.parameters / 1e6)
      << "\n";
  out << absl::StrFormat("%-10s %8s %16s %16s %12s\n", "dtype", "tensors", "parameters", "bytes",
                         "bits/weight");
  std::vector<std::pair<std::string, DtypeTotals>> rows(f.by_dtype.begin(), f.by_dtype.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.bytes > b.second.bytes; });
  auto bits = [](uint64_t bytes, uint64_t params) {
    return params ? 8.0 * static_cast<double>(bytes) / static_cast<double>(params) : 0.0;
  };
  for (const auto& [k, v] : rows) {
    out << absl::StrFormat("%-10s %8d %16s %16s %12.2f\n", EscapeUntrusted(k), v.tensors,
                           WithCommas(v.parameters), WithCommas(v.bytes),
                           bits(v.bytes, v.parameters));
  }
  out << absl::StrFormat("%-10s %8d %16s %16s %12.2f\n", "total", f.tensor_count,
                         WithCommas(f.parameters), WithCommas(f.tensor_bytes),
                         bits(f.tensor_bytes, f.parameters));
  out << "file " << WithCommas(f.file_size) << " bytes = " << WithCommas(f.header_bytes)
      << " header + " << WithCommas(f.tensor_bytes) << " tensors + " << WithCommas(f.padding_bytes)
      << " padding\n";
  if (f.sharded) {
    if (f.sharded->declared_total_size) {
      out << "index total_size " << WithCommas(*f.sharded->declared_total_size) << ", computed "
          << WithCommas(f.tensor_bytes) << "\n";
    }
  }
  for (const auto& w : f.warnings) out << "warning: " << EscapeUntrusted(w) << "\n";
  if (with_tensors) {
    for (const auto& t : f.tensors) {
      std::string shape = "[";
      for (size_t i = 0; i < t.shape.size(); ++i) {
        shape += (i ? ", " : "") + std::to_string(t.shape[i]);
      }
      shape += "]";
      out << EscapeUntrusted(t.name) << " " << EscapeUntrusted(t.dtype) << " " << shape << " "
          << WithCommas(t.bytes) << "\n";
    }
  }
  if (f.read_stats.requests > 0) {
    out << "read " << WithCommas(f.read_stats.bytes) << " bytes in " << f.read_stats.requests
        << " request(s)\n";
  }
  return out.str();
}

}  // namespace modelfs::cli
