// One tensor naming: the map between a GGUF file's tensor names (llama.cpp's,
// `blk.N.attn_q.weight`) and a Hugging Face safetensors checkpoint's
// (`model.layers.N.self_attn.q_proj.weight`) for the architectures llama, mistral, mixtral, qwen2,
// qwen3 and gemma, with the transforms llama.cpp's convert_hf_to_gguf.py applies on the way
// (docs/tensor-names.md says where each fact comes from):
//
//  - kPermuteRows: llama/mistral/mixtral attention Q and K rows are reordered per head from
//    Hugging Face's "rotate half" layout to ggml's interleaved pairs: GGUF row (h, i, j) is HF
//    row (h, j, i) for head h, i < head_dim/2, j in {0, 1} (Q over n_head heads, K over
//    n_head_kv). Not for qwen2/qwen3/gemma.
//  - kAddOne: gemma's norm weights are stored as w + 1 (HF's GemmaRMSNorm computes x * (1 + w),
//    ggml's rms_norm then a multiply by the stored weight).
//  - kStackExperts: mixtral's per-expert `block_sparse_moe.experts.E.w1/w2/w3` become one 3-D
//    `ffn_gate_exps/ffn_down_exps/ffn_up_exps`, expert E being the E-th slice of the slowest dim.
//  - tied embeddings: a checkpoint without `lm_head.weight` has no `output.weight` (the output
//    projection is `token_embd.weight`); TiedOutput() names the pair.
//
// The canonical name of a tensor is its GGUF name. Shapes: a safetensors shape is row-major
// (last dim fastest); GGUF dims list ne[0] (fastest) first, so GGUF dims are the reversed HF
// shape; a stack of E experts of HF shape [out, in] has GGUF dims [in, out, E].
//
// Thread safety: TensorNameMap is immutable after construction; the free functions are pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace modelfs {

enum class TensorTransform {
  kNone,
  kPermuteRows,   // Q/K rows, over `heads` heads (see above)
  kAddOne,        // stored = hf + 1
  kStackExperts,  // GGUF tensor = the HF experts' tensors concatenated in expert order
};
// "none", "permute_rows", "add_one", "stack_experts": as the attestation records them.
const char* TensorTransformName(TensorTransform t);

// What an architecture's map needs to know beyond names.
struct TensorArchParams {
  uint32_t n_head = 0;     // attention heads (Q), for the permutation
  uint32_t n_head_kv = 0;  // key/value heads (K); 0 means n_head
  uint32_t n_expert = 0;   // mixtral experts; 0 for dense models
};

// One GGUF tensor and the Hugging Face tensor(s) it is made from.
struct TensorMapping {
  std::string gguf_name;              // canonical
  std::vector<std::string> hf_names;  // one; n_expert for kStackExperts, in expert order
  TensorTransform transform = TensorTransform::kNone;
  uint32_t heads = 0;  // for kPermuteRows
};

class TensorNameMap {
 public:
  // `architecture` is a GGUF general.architecture or a Hugging Face config model_type: "llama",
  // "mistral", "mixtral", "qwen2", "qwen3", "gemma" (case-insensitive). A GGUF "llama" with
  // n_expert > 0 is mixtral. Errors: kUnimplemented naming an architecture the map does not
  // cover; kInvalidArgument for n_head 0 on an architecture that permutes, or n_head not
  // dividing into n_head_kv.
  static absl::StatusOr<TensorNameMap> ForArchitecture(std::string_view architecture,
                                                       const TensorArchParams& params);

  // The mapping of a GGUF tensor name; nullopt for a name the map does not know.
  std::optional<TensorMapping> FromGguf(std::string_view gguf_name) const;
  // The mapping an HF tensor belongs to (for an expert tensor, its stack), and, through
  // `expert`, the expert's index; nullopt for an unknown name.
  std::optional<TensorMapping> FromHf(std::string_view hf_name, uint32_t* expert = nullptr) const;

  // "llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma".
  const std::string& architecture() const { return architecture_; }
  const TensorArchParams& params() const { return params_; }
  bool permutes_qk() const;

  // The GGUF output projection and the embedding it falls back to when tied:
  // {"output.weight", "token_embd.weight"}.
  static std::pair<std::string, std::string> TiedOutput() {
    return {"output.weight", "token_embd.weight"};
  }

 private:
  TensorNameMap(std::string architecture, TensorArchParams params)
      : architecture_(std::move(architecture)), params_(params) {}
  std::string architecture_;
  TensorArchParams params_;
};

// GGUF dims (ne[0] first) of an HF tensor of `hf_shape` (row-major): the shape reversed.
std::vector<uint64_t> GgufDimsFromHfShape(const std::vector<uint64_t>& hf_shape);
// The inverse.
std::vector<uint64_t> HfShapeFromGgufDims(const std::vector<uint64_t>& gguf_dims);

// Applies `mapping.transform` to the values of ONE HF tensor (row-major, `hf_shape`), giving
// the values as the GGUF tensor stores them (for kStackExperts, the expert's slice: the caller
// concatenates the slices in expert order). Errors: kInvalidArgument when the shape does not
// fit the transform (rows not a multiple of heads * 2), naming the tensor.
absl::Status HfToGgufValues(const TensorMapping& mapping, const std::vector<uint64_t>& hf_shape,
                            std::vector<float>& values);
// The inverse (GGUF values of one tensor, or one expert's slice, back to HF order and values).
absl::Status GgufToHfValues(const TensorMapping& mapping, const std::vector<uint64_t>& hf_shape,
                            std::vector<float>& values);

}  // namespace modelfs
