// Tensor-by-tensor equivalence of a derived model (a conversion or a quantization) with its
// source: every tensor of both is decoded to float (safetensors F32/F16/BF16, and each GGUF type
// core/formats/dequant.h decodes), put in the same order and layout by the tensor name map
// (core/formats/tensor_names.h) when the source is Hugging Face safetensors and the derived model
// is GGUF, and compared: relative L2 error, max abs error (and relative to the source's largest
// magnitude) and cosine similarity, each against a tolerance per pair of storage types
// (DefaultTolerance; docs/signing.md justifies the values).
//
// Reading cost: the tensors are compared one unit at a time, in the source's file order; each
// byte of either model is read once (a tensor in one ReadAt), and at most one source unit and
// its derived tensor are held in memory (as float), so the peak is bounded by the largest pair.
//
// Thread safety: CompareModels uses the readers it is given, which are not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/formats/tensor_names.h"
#include "core/io/range_reader.h"

namespace modelfs {

// One model's weight files (.safetensors or .gguf, in the model's file order).
struct ModelFileReader {
  std::string path;
  std::unique_ptr<RangeReader> reader;
};

struct Tolerance {
  double max_rel_l2 = 0;   // ||d - s|| / ||s||
  double min_cosine = 1;   // s.d / (|s| |d|)
  double max_abs_rel = 0;  // max |d - s| / max |s|
};
// Overrides from the command line: each set field replaces that field of every pair's default.
struct ToleranceOverride {
  std::optional<double> max_rel_l2, min_cosine, max_abs_rel;
};
// "BF16->Q8_0": the key a tolerance is recorded under (ggml type names, upper case).
std::string TolerancePair(std::string_view source_type, std::string_view derived_type);
// The default for a pair of storage types (ggml names: "F32", "F16", "BF16", "Q8_0", ...), decided
// by the derived type's precision (a source at least as coarse as the derived type, such as BF16
// to F32, gets the exact bound).
Tolerance DefaultTolerance(std::string_view source_type, std::string_view derived_type);

struct TensorComparison {
  std::vector<std::string> source;  // one name, or a mixtral stack's experts
  std::string derived;
  std::string source_type, derived_type;  // ggml names
  std::vector<uint64_t> shape;            // the derived tensor's, row-major (slowest first)
  std::string transform;                  // TensorTransformName
  uint64_t elements = 0;
  double rel_l2 = 0, max_abs = 0, max_abs_rel = 0, cosine = 1;
  bool pass = false;
  std::string reason;  // why it failed ("" when it passed)
};

struct EquivalenceReport {
  // "identity" (same format on both sides) or the architecture of the name map used.
  std::string name_map = "identity";
  TensorArchParams arch_params;
  std::vector<TensorComparison> tensors;        // in the source's file order
  std::vector<std::string> missing;             // source tensors with no derived counterpart
  std::vector<std::string> extra;               // derived tensors no source tensor maps to
  std::map<std::string, Tolerance> tolerances;  // TolerancePair -> the tolerance applied
  uint64_t source_bytes_read = 0, derived_bytes_read = 0;
  uint64_t source_tensor_bytes = 0, derived_tensor_bytes = 0;
  bool equivalent = false;

  size_t failed() const;
  // One line per failing tensor (at most `limit`), missing and extra tensors named: the text of
  // a refusal. "" when equivalent.
  std::string Refusal(size_t limit = 5) const;
};

// Compares `derived` with `source`. Errors (the comparison could not be made, as opposed to a
// report that says "not equivalent"): kInvalidArgument for files that are neither safetensors
// nor GGUF, or a model without weight files; kUnimplemented for a GGUF source with a safetensors
// derived model, or a GGUF architecture the name map does not cover; the parsers' and readers'
// errors (naming the file).
absl::StatusOr<EquivalenceReport> CompareModels(std::vector<ModelFileReader>& source,
                                                std::vector<ModelFileReader>& derived,
                                                const ToleranceOverride& overrides = {});

}  // namespace modelfs
