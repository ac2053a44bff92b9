// CompareModels: the catalog of each side's tensors from the headers, the units to compare (one
// derived tensor and the source tensor(s) it is made from), then one unit at a time: read, decode,
// transform, measure.
#include "core/attest/equivalence.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/formats/dequant.h"
#include "core/formats/ggml_types.h"
#include "core/formats/gguf.h"
#include "core/formats/safetensors.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

// One tensor of one side, wherever it lives.
struct CatalogTensor {
  std::string name;
  size_t file = 0;
  const GgmlType* type = nullptr;
  std::vector<uint64_t> shape;  // row-major (slowest first), whatever the file's convention
  uint64_t offset = 0;          // absolute in the file
  uint64_t nbytes = 0;
  uint64_t elements = 0;
};

struct Catalog {
  bool gguf = false;
  std::vector<CatalogTensor> tensors;  // in file order, files in the model's order
  std::map<std::string, size_t> by_name;
  std::optional<GgufFile> first_gguf;  // for the architecture and head counts
};

bool IsGgufName(const std::string& path) { return absl::EndsWith(path, ".gguf"); }
bool IsSafetensorsName(const std::string& path) { return absl::EndsWith(path, ".safetensors"); }

// safetensors dtype -> the ggml type that decodes it.
const GgmlType* TypeOfDtype(const std::string& dtype) {
  if (dtype == "F32" || dtype == "F16" || dtype == "BF16" || dtype == "F64" || dtype == "I8" ||
      dtype == "I16" || dtype == "I32" || dtype == "I64") {
    return FindGgmlTypeByName(dtype);
  }
  return nullptr;
}

absl::StatusOr<Catalog> BuildCatalog(std::vector<ModelFileReader>& files, const char* side) {
  Catalog c;
  bool any_st = false;
  for (size_t i = 0; i < files.size(); ++i) {
    ModelFileReader& f = files[i];
    if (IsGgufName(f.path)) {
      ASSIGN_OR_RETURN(GgufFile g, ParseGguf(*f.reader));
      c.gguf = true;
      for (const GgufTensor& t : g.tensors) {
        c.tensors.push_back(
            {t.name, i, t.type, HfShapeFromGgufDims(t.dims), t.offset, t.nbytes, t.elements});
      }
      if (!c.first_gguf) c.first_gguf = std::move(g);
    } else if (IsSafetensorsName(f.path)) {
      ASSIGN_OR_RETURN(SafetensorsFile s, ParseSafetensors(*f.reader));
      any_st = true;
      for (const SafetensorsTensor& t : s.tensors) {
        c.tensors.push_back({t.name, i, TypeOfDtype(t.dtype), t.shape, s.data_start + t.begin,
                             t.size(), t.elements});
        if (c.tensors.back().type == nullptr) {
          return absl::UnimplementedError(absl::StrCat(f.path, ": tensor '", t.name, "' has dtype ",
                                                       t.dtype, ", which is not decoded"));
        }
      }
    }
  }
  if (c.tensors.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", side, " model has no .safetensors or .gguf weights"));
  }
  if (c.gguf && any_st) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", side, " model holds both GGUF and safetensors weights"));
  }
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    if (!c.by_name.emplace(c.tensors[i].name, i).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("the ", side, " model has tensor '", c.tensors[i].name, "' in two files"));
    }
  }
  return c;
}

absl::StatusOr<std::vector<float>> ReadValues(std::vector<ModelFileReader>& files,
                                              const CatalogTensor& t) {
  RangeReader& r = *files[t.file].reader;
  ASSIGN_OR_RETURN(std::string bytes, r.ReadAt(t.offset, t.nbytes));
  auto values = DequantizeValues(*t.type, bytes, t.elements);
  if (!values.ok()) {
    return absl::Status(values.status().code(), absl::StrCat(r.name(), ": tensor '", t.name,
                                                             "': ", values.status().message()));
  }
  return values;
}

void Measure(const std::vector<float>& s, const std::vector<float>& d, TensorComparison& out) {
  double ss = 0, dd = 0, sd = 0, diff2 = 0, max_abs = 0, max_s = 0;
  bool nan = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const double a = s[i], b = d[i];
    if (std::isnan(a) != std::isnan(b)) nan = true;
    if (std::isnan(a) || std::isnan(b)) continue;
    ss += a * a;
    dd += b * b;
    sd += a * b;
    diff2 += (b - a) * (b - a);
    max_abs = std::max(max_abs, std::fabs(b - a));
    max_s = std::max(max_s, std::fabs(a));
  }
  out.rel_l2 = ss > 0 ? std::sqrt(diff2) / std::sqrt(ss) : (diff2 > 0 ? INFINITY : 0.0);
  out.cosine = (ss > 0 && dd > 0) ? sd / (std::sqrt(ss) * std::sqrt(dd)) : (ss == dd ? 1.0 : 0.0);
  out.max_abs = max_abs;
  out.max_abs_rel = max_s > 0 ? max_abs / max_s : (max_abs > 0 ? INFINITY : 0.0);
  if (nan) out.reason = "NaN in one model where the other has a number";
}

void Judge(const Tolerance& tol, TensorComparison& c) {
  if (!c.reason.empty()) return;
  std::vector<std::string> why;
  if (!(c.rel_l2 <= tol.max_rel_l2)) {
    why.push_back(absl::StrFormat("relative L2 error %.3g > %.3g", c.rel_l2, tol.max_rel_l2));
  }
  if (!(c.cosine >= tol.min_cosine)) {
    why.push_back(absl::StrFormat("cosine %.6f < %.6f", c.cosine, tol.min_cosine));
  }
  if (!(c.max_abs_rel <= tol.max_abs_rel)) {
    why.push_back(absl::StrFormat("max abs error %.3g (%.3g of the largest magnitude) > %.3g",
                                  c.max_abs, c.max_abs_rel, tol.max_abs_rel));
  }
  c.reason = absl::StrJoin(why, ", ");
}

std::string ShapeString(const std::vector<uint64_t>& s) {
  return absl::StrCat("[", absl::StrJoin(s, ", "), "]");
}

// The GGUF architecture's parameters for the name map.
TensorArchParams ArchParams(const GgufFile& g) {
  const std::string arch = g.Architecture();
  TensorArchParams p;
  p.n_head = static_cast<uint32_t>(g.GetUint(arch + ".attention.head_count").value_or(0));
  p.n_head_kv = static_cast<uint32_t>(g.GetUint(arch + ".attention.head_count_kv").value_or(0));
  p.n_expert = static_cast<uint32_t>(g.GetUint(arch + ".expert_count").value_or(0));
  return p;
}

}  // namespace

std::string TolerancePair(std::string_view source_type, std::string_view derived_type) {
  return absl::StrCat(absl::string_view(source_type.data(), source_type.size()), "->",
                      absl::string_view(derived_type.data(), derived_type.size()));
}

Tolerance DefaultTolerance(std::string_view source_type, std::string_view derived_type) {
  // Significant bits of the float types: a source no finer than the derived type converts
  // exactly (BF16/F16 to F32, F16 to F16, ...).
  auto mantissa = [](std::string_view t) -> int {
    if (t == "F64") return 53;
    if (t == "F32") return 24;
    if (t == "F16") return 11;
    if (t == "BF16") return 8;
    return 0;
  };
  const int src = mantissa(source_type), dst = mantissa(derived_type);
  if (dst > 0 && src > 0 && src <= dst && !(source_type == "BF16" && derived_type == "F16")) {
    return {1e-6, 0.999999, 1e-6};
  }
  if (derived_type == "F32" || derived_type == "F64") return {1e-6, 0.999999, 1e-6};
  // F16 keeps 11 bits: at most 2^-11 relative per element; BF16's exponent range is wider than
  // F16's, so BF16 -> F16 is exact except below F16's normal range (6.1e-5), where the error is
  // absolute and tiny next to the tensor's largest magnitude.
  if (derived_type == "F16") return {1e-3, 0.99999, 1e-3};
  if (derived_type == "BF16") return {4e-3, 0.9999, 4e-3};
  // Q8_0: a block's scale is its max/127, the rounding error at most half a step, 1/254 of the
  // block's largest magnitude (plus the scale's F16 rounding); over a normal-ish tensor the
  // relative L2 error is about 0.5%.
  if (derived_type == "Q8_0") return {0.02, 0.999, 0.01};
  // Q4_0: 16 levels over [-max, max]: half a step is 1/16 of the block's max.
  if (derived_type == "Q4_0") return {0.15, 0.99, 0.08};
  // Q4_K: 16 levels between a sub-block's min and max, with 6-bit scales and mins.
  if (derived_type == "Q4_K") return {0.15, 0.985, 0.15};
  // Other 4- to 6-bit types, should dequant.h learn them: as loose as Q4_K.
  return {0.15, 0.985, 0.15};
}

size_t EquivalenceReport::failed() const {
  return std::count_if(tensors.begin(), tensors.end(),
                       [](const TensorComparison& t) { return !t.pass; });
}

std::string EquivalenceReport::Refusal(size_t limit) const {
  if (equivalent) return "";
  std::vector<std::string> lines;
  size_t shown = 0;
  for (const TensorComparison& t : tensors) {
    if (t.pass) continue;
    if (shown++ == limit) {
      lines.push_back(absl::StrCat("... and ", failed() - limit, " more tensors differ"));
      break;
    }
    lines.push_back(absl::StrCat(t.derived, " (", t.source_type, "->", t.derived_type,
                                 t.source.size() == 1 && t.source[0] != t.derived
                                     ? absl::StrCat(", source ", t.source[0])
                                     : std::string(),
                                 "): ", t.reason));
  }
  for (const std::string& m : missing) {
    lines.push_back(absl::StrCat(m, ": missing from the derived model"));
  }
  for (const std::string& e : extra) {
    lines.push_back(absl::StrCat(e, ": in the derived model, not made from any source tensor"));
  }
  return absl::StrJoin(lines, "\n");
}

absl::StatusOr<EquivalenceReport> CompareModels(std::vector<ModelFileReader>& source,
                                                std::vector<ModelFileReader>& derived,
                                                const ToleranceOverride& overrides) {
  ASSIGN_OR_RETURN(Catalog src, BuildCatalog(source, "source"));
  ASSIGN_OR_RETURN(Catalog dst, BuildCatalog(derived, "derived"));
  EquivalenceReport report;
  std::optional<TensorNameMap> map;
  if (src.gguf && !dst.gguf) {
    return absl::UnimplementedError(
        "a GGUF source with a safetensors derived model is not compared (the source must be the "
        "Hugging Face checkpoint)");
  }
  if (!src.gguf && dst.gguf) {
    const TensorArchParams p = ArchParams(*dst.first_gguf);
    ASSIGN_OR_RETURN(map, TensorNameMap::ForArchitecture(dst.first_gguf->Architecture(), p));
    report.name_map = map->architecture();
    report.arch_params = map->params();
  }
  for (const CatalogTensor& t : src.tensors) report.source_tensor_bytes += t.nbytes;
  for (const CatalogTensor& t : dst.tensors) report.derived_tensor_bytes += t.nbytes;

  std::set<std::string> used_derived;
  std::set<std::string> done_source;
  for (const CatalogTensor& first : src.tensors) {
    if (done_source.count(first.name)) continue;
    // The unit `first` belongs to.
    TensorMapping m{first.name, {first.name}, TensorTransform::kNone, 0};
    if (map) {
      auto found = map->FromHf(first.name);
      if (!found) {
        report.missing.push_back(first.name);
        done_source.insert(first.name);
        continue;
      }
      m = *found;
    }
    for (const std::string& n : m.hf_names) done_source.insert(n);
    auto dit = dst.by_name.find(m.gguf_name);
    if (dit == dst.by_name.end()) {
      for (const std::string& n : m.hf_names) {
        if (src.by_name.count(n)) report.missing.push_back(n);
      }
      continue;
    }
    const CatalogTensor& d = dst.tensors[dit->second];
    used_derived.insert(d.name);

    TensorComparison c;
    c.source = m.hf_names;
    c.derived = d.name;
    c.source_type = first.type->name;
    c.derived_type = d.type->name;
    c.shape = d.shape;
    c.transform = TensorTransformName(m.transform);
    c.elements = d.elements;
    // The source parts, each transformed, concatenated in order (experts of a stack).
    std::vector<float> s;
    std::vector<uint64_t> expected_shape;
    std::string problem;
    for (size_t k = 0; k < m.hf_names.size(); ++k) {
      auto it = src.by_name.find(m.hf_names[k]);
      if (it == src.by_name.end()) {
        problem = absl::StrCat("source tensor ", m.hf_names[k], " of the stack is missing");
        report.missing.push_back(m.hf_names[k]);
        break;
      }
      const CatalogTensor& part = src.tensors[it->second];
      if (k == 0) {
        expected_shape = part.shape;
      } else if (part.shape != expected_shape) {
        problem = absl::StrCat("source tensor ", part.name, " has shape ", ShapeString(part.shape),
                               ", the stack's first ", ShapeString(expected_shape));
        break;
      }
      ASSIGN_OR_RETURN(std::vector<float> v, ReadValues(source, part));
      RETURN_IF_ERROR(HfToGgufValues(m, part.shape, v));
      s.insert(s.end(), v.begin(), v.end());
    }
    if (m.transform == TensorTransform::kStackExperts) {
      expected_shape.insert(expected_shape.begin(), m.hf_names.size());
    }
    if (problem.empty() && expected_shape != d.shape) {
      problem = absl::StrCat("shape ", ShapeString(d.shape), ", the source's ",
                             ShapeString(expected_shape));
    }
    if (problem.empty()) {
      ASSIGN_OR_RETURN(std::vector<float> dv, ReadValues(derived, d));
      Measure(s, dv, c);
      const std::string pair = TolerancePair(c.source_type, c.derived_type);
      Tolerance tol = DefaultTolerance(c.source_type, c.derived_type);
      if (overrides.max_rel_l2) tol.max_rel_l2 = *overrides.max_rel_l2;
      if (overrides.min_cosine) tol.min_cosine = *overrides.min_cosine;
      if (overrides.max_abs_rel) tol.max_abs_rel = *overrides.max_abs_rel;
      report.tolerances[pair] = tol;
      Judge(tol, c);
    } else {
      c.reason = problem;
    }
    c.pass = c.reason.empty();
    report.tensors.push_back(std::move(c));
  }
  for (const CatalogTensor& t : dst.tensors) {
    if (!used_derived.count(t.name)) report.extra.push_back(t.name);
  }
  for (const ModelFileReader& f : source) report.source_bytes_read += f.reader->stats().bytes;
  for (const ModelFileReader& f : derived) report.derived_bytes_read += f.reader->stats().bytes;
  report.equivalent = report.failed() == 0 && report.missing.empty() && report.extra.empty();
  return report;
}

}  // namespace modelfs
