#include "core/formats/model_shape.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <map>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status/status_macros.h"
#include "core/text/number_format.h"

namespace modelfs {
namespace {

using nlohmann::json;

// Where a value came from, so every error names the document and the exact key.
struct Source {
  std::string document;  // "config.json" or "GGUF metadata"
  std::string prefix;    // "text_config." when reading a nested config
  std::string Key(std::string_view key) const { return absl::StrCat(prefix, std::string(key)); }
};

absl::Status NotANumber(const Source& src, std::string_view key, const json& v) {
  return absl::InvalidArgumentError(absl::StrCat(src.document, ": ", src.Key(key), " is ", v.dump(),
                                                 ", not a non-negative integer"));
}

// A JSON value as a non-negative integer. Integral floats (4096.0) are accepted because some
// exporters write them; fractions, negatives, strings and booleans are not.
absl::StatusOr<uint64_t> AsUint(const Source& src, std::string_view key, const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) {
    int64_t i = v.get<int64_t>();
    if (i >= 0) return static_cast<uint64_t>(i);
  } else if (v.is_number_float()) {
    double d = v.get<double>();
    if (d >= 0 && d <= 9007199254740992.0 && std::floor(d) == d) return static_cast<uint64_t>(d);
  }
  return NotANumber(src, key, v);
}

// The first of `keys` present in obj with a non-null value; nullptr when none is.
const json* FindAny(const json& obj, std::initializer_list<const char*> keys,
                    std::string* found = nullptr) {
  for (const char* k : keys) {
    auto it = obj.find(k);
    if (it != obj.end() && !it->is_null()) {
      if (found != nullptr) *found = k;
      return &*it;
    }
  }
  return nullptr;
}

absl::StatusOr<std::optional<uint64_t>> OptionalUint(const Source& src, const json& obj,
                                                     std::initializer_list<const char*> keys) {
  std::string found;
  const json* v = FindAny(obj, keys, &found);
  if (v == nullptr) return std::optional<uint64_t>();
  ASSIGN_OR_RETURN(uint64_t n, AsUint(src, found, *v));
  return std::optional<uint64_t>(n);
}

absl::StatusOr<uint64_t> RequiredUint(const Source& src, const json& obj,
                                      std::initializer_list<const char*> keys) {
  ASSIGN_OR_RETURN(std::optional<uint64_t> v, OptionalUint(src, obj, keys));
  if (!v.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(src.document, ": missing ", src.Key(*keys.begin())));
  }
  return *v;
}

absl::Status CheckLayers(const Source& src, std::string_view key, uint64_t layers) {
  if (layers == 0 || layers > kMaxModelLayers) {
    return absl::InvalidArgumentError(absl::StrCat(src.document, ": ", src.Key(key), " is ", layers,
                                                   "; expected 1..", kMaxModelLayers));
  }
  return absl::OkStatus();
}

// a + b for two header values, refusing a sum that wraps.
absl::StatusOr<uint64_t> CheckedSum(const Source& src, std::string_view a_key, uint64_t a,
                                    std::string_view b_key, uint64_t b) {
  if (a > std::numeric_limits<uint64_t>::max() - b) {
    return absl::InvalidArgumentError(absl::StrCat(src.document, ": ", src.Key(a_key), " ", a,
                                                   " + ", src.Key(b_key), " ", b, " overflows"));
  }
  return a + b;
}

absl::Status CheckPositive(const Source& src, std::string_view key, uint64_t v) {
  if (v == 0) {
    return absl::InvalidArgumentError(absl::StrCat(src.document, ": ", src.Key(key), " is 0"));
  }
  return absl::OkStatus();
}

// Layer kinds that keep a fixed-size state instead of a per-token KV cache, or no attention at
// all (Nemotron-H's MLP and MoE layers). Unknown kinds count as attention: over-estimating
// memory is the safe mistake.
bool KeepsNoKvCache(std::string_view type) {
  static constexpr std::string_view kNoCache[] = {
      "linear_attention", "mamba", "mamba2", "ssm", "conv",    "short_conv",
      "recurrent",        "rwkv",  "mlp",    "moe", "deltanet"};
  std::string lower = absl::AsciiStrToLower(absl::string_view(type.data(), type.size()));
  return std::find(std::begin(kNoCache), std::end(kNoCache), lower) != std::end(kNoCache);
}

bool IsKnownAttentionType(std::string_view type) {
  return type == kFullAttention || type == kSlidingAttention || type == "attention" ||
         type == "chunked_attention" || type == "hybrid";
}

absl::StatusOr<std::vector<std::string>> StringList(const Source& src, std::string_view key,
                                                    const json& v, uint64_t layers,
                                                    std::string_view layers_key) {
  if (!v.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(src.document, ": ", src.Key(key), " is not an array"));
  }
  if (v.size() != layers) {
    return absl::InvalidArgumentError(absl::StrCat(src.document, ": ", src.Key(key), " has ",
                                                   v.size(), " entries but ", src.Key(layers_key),
                                                   " is ", layers));
  }
  std::vector<std::string> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(src.document, ": ", src.Key(key), "[", i,
                                                     "] is ", v[i].dump(), ", not a string"));
    }
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

// Fills kv_heads_per_layer from layer_types (kv_heads where the kind holds a cache), counts the
// attention layers and writes the notes every reader shares.
void FinishShape(ModelShape& s) {
  s.kv_heads_per_layer.resize(s.layers);
  s.attention_layers = 0;
  std::map<std::string, uint64_t> stateful;
  std::map<std::string, uint64_t> unknown;
  for (uint64_t i = 0; i < s.layers; ++i) {
    const std::string& t = s.layer_types[i];
    if (KeepsNoKvCache(t)) {
      ++stateful[t];
      s.kv_heads_per_layer[i] = 0;
    } else if (s.kv_heads_per_layer[i] > 0) {
      ++s.attention_layers;
      if (!IsKnownAttentionType(t)) ++unknown[t];
    }
  }
  for (const auto& [t, n] : unknown) {
    s.notes.push_back(absl::StrCat("layer type '", t, "' (", n,
                                   " layers) is not known here: counted as attention with a KV "
                                   "cache, which may over-estimate"));
  }
  if (s.attention_layers < s.layers) {
    std::vector<std::string> parts;
    for (const auto& [t, n] : stateful) parts.push_back(absl::StrCat(n, " ", t));
    uint64_t other = s.layers - s.attention_layers;
    std::string kinds = parts.empty() ? "" : absl::StrCat(" (", absl::StrJoin(parts, ", "), ")");
    s.notes.push_back(absl::StrCat(
        "hybrid model: ", s.attention_layers, " of ", s.layers,
        " layers hold a KV cache; the other ", other, kinds,
        " keep a fixed-size state per sequence that is not counted in the KV figures"));
  }
  if (s.sliding_window.has_value()) {
    uint64_t sliding = s.SlidingLayers();
    if (sliding > 0) {
      s.notes.push_back(absl::StrCat(
          "sliding window of ", WithCommas(*s.sliding_window), " tokens on ", sliding, " of ",
          s.attention_layers,
          " attention layers: the headline KV figure caches the full context in every layer "
          "(as runtimes without window-aware caches do); the windowed figure caps those layers "
          "at the window"));
    }
  }
  if (s.mla) {
    s.notes.push_back(absl::StrCat(
        "MLA: each layer caches one latent of ", s.mla_kv_dim, " values (kv_lora_rank ",
        s.kv_lora_rank, " + rope head dim ", s.rope_head_dim,
        ") per token instead of K and V per head; a runtime without MLA support caches ",
        s.kv_heads, " x (", s.head_dim_k, " + ", s.head_dim_v, ") per token per layer"));
  }
}

// Sliding layers for a window with no explicit per-layer list: every `pattern`-th layer is
// global, the rest slide (pattern 0: all layers slide, as in Mistral 7B v0.1).
void ApplySlidingPattern(std::vector<std::string>& types, uint64_t pattern) {
  for (uint64_t i = 0; i < types.size(); ++i) {
    if (types[i] != kFullAttention) continue;
    if (pattern == 0 || (i + 1) % pattern != 0) types[i] = kSlidingAttention;
  }
}

// Architectures whose window pattern is implied rather than written in the file.
uint64_t DefaultSlidingPattern(std::string_view arch) {
  if (arch == "gemma2" || arch == "gpt-oss" || arch == "gpt_oss") return 2;
  if (arch == "gemma3" || arch == "gemma3_text") return 6;
  if (arch == "cohere2") return 4;
  return 0;
}

absl::StatusOr<std::vector<std::string>> ConfigLayerTypes(const Source& src, const json& cfg,
                                                          uint64_t layers, bool* explicit_types) {
  *explicit_types = true;
  if (const json* v = FindAny(cfg, {"layer_types"})) {
    return StringList(src, "layer_types", *v, layers, "num_hidden_layers");
  }
  if (const json* v = FindAny(cfg, {"layers_block_type"})) {
    return StringList(src, "layers_block_type", *v, layers, "num_hidden_layers");
  }
  if (const json* v = FindAny(cfg, {"hybrid_override_pattern"})) {
    // Nemotron-H: one character per layer, '*' attention, 'M' Mamba-2, '-' MLP, 'E' MoE.
    if (!v->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(src.document, ": ", src.Key("hybrid_override_pattern"), " is not a string"));
    }
    std::string pattern = v->get<std::string>();
    if (pattern.size() != layers) {
      return absl::InvalidArgumentError(absl::StrCat(
          src.document, ": ", src.Key("hybrid_override_pattern"), " has ", pattern.size(),
          " layers but ", src.Key("num_hidden_layers"), " is ", layers));
    }
    std::vector<std::string> out;
    for (size_t i = 0; i < pattern.size(); ++i) {
      switch (pattern[i]) {
        case '*':
          out.push_back("attention");
          break;
        case 'M':
          out.push_back("mamba");
          break;
        case '-':
          out.push_back("mlp");
          break;
        case 'E':
          out.push_back("moe");
          break;
        default:
          return absl::InvalidArgumentError(
              absl::StrCat(src.document, ": ", src.Key("hybrid_override_pattern"), "[", i, "] is '",
                           std::string(1, pattern[i]), "', not one of * M - E"));
      }
    }
    return out;
  }
  if (const json* v = FindAny(cfg, {"attn_layer_indices"})) {
    if (!v->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat(src.document, ": ", src.Key("attn_layer_indices"), " is not an array"));
    }
    std::vector<std::string> out(layers, "mamba");
    for (const json& e : *v) {
      ASSIGN_OR_RETURN(uint64_t i, AsUint(src, "attn_layer_indices", e));
      if (i >= layers) {
        return absl::InvalidArgumentError(absl::StrCat(
            src.document, ": ", src.Key("attn_layer_indices"), " names layer ", i, " of ", layers));
      }
      out[i] = "attention";
    }
    return out;
  }
  ASSIGN_OR_RETURN(std::optional<uint64_t> period, OptionalUint(src, cfg, {"attn_layer_period"}));
  if (period.has_value()) {
    // Jamba: layer i is attention when i % period == offset, Mamba otherwise.
    RETURN_IF_ERROR(CheckPositive(src, "attn_layer_period", *period));
    ASSIGN_OR_RETURN(std::optional<uint64_t> offset, OptionalUint(src, cfg, {"attn_layer_offset"}));
    std::vector<std::string> out(layers, "mamba");
    for (uint64_t i = 0; i < layers; ++i) {
      if (i % *period == offset.value_or(0)) out[i] = "attention";
    }
    return out;
  }
  ASSIGN_OR_RETURN(std::optional<uint64_t> interval,
                   OptionalUint(src, cfg, {"full_attention_interval"}));
  if (interval.has_value()) {
    // Qwen3-Next: every interval-th layer is full attention, the rest Gated DeltaNet.
    RETURN_IF_ERROR(CheckPositive(src, "full_attention_interval", *interval));
    std::vector<std::string> out(layers, "linear_attention");
    for (uint64_t i = 0; i < layers; ++i) {
      if ((i + 1) % *interval == 0) out[i] = kFullAttention;
    }
    return out;
  }
  *explicit_types = false;
  return std::vector<std::string>(layers, kFullAttention);
}

// Architectures with no attention at all (Mamba2's num_heads are SSM heads, not attention).
bool IsPureStateSpaceModel(const std::string& arch_lower) {
  return arch_lower == "mamba" || arch_lower == "mamba2" || arch_lower == "falcon_mamba" ||
         absl::StartsWith(arch_lower, "rwkv");
}

// Multimodal wrappers keep the language model's numbers one level down.
const json* LanguageModelConfig(const json& config, std::string* prefix) {
  if (FindAny(config, {"num_hidden_layers", "n_layer", "num_layers", "n_layers"}) != nullptr) {
    return &config;
  }
  for (const char* key : {"text_config", "llm_config", "language_config"}) {
    auto it = config.find(key);
    if (it != config.end() && it->is_object()) {
      *prefix = absl::StrCat(key, ".");
      return &*it;
    }
  }
  return &config;
}

std::string StringField(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it != obj.end() && it->is_string()) return it->get<std::string>();
  return "";
}

}  // namespace

uint64_t ModelShape::KvHeadsOfLayer(uint64_t i) const {
  if (i >= layers) return 0;
  if (kv_heads_per_layer.size() == layers) return kv_heads_per_layer[i];
  return kv_heads;
}

bool ModelShape::IsSlidingLayer(uint64_t i) const {
  if (!sliding_window.has_value() || i >= layers) return false;
  if (layer_types.size() == layers) return layer_types[i] == kSlidingAttention;
  return true;
}

uint64_t ModelShape::SlidingLayers() const {
  uint64_t n = 0;
  for (uint64_t i = 0; i < layers; ++i) {
    if (IsSlidingLayer(i) && KvHeadsOfLayer(i) > 0) ++n;
  }
  return n;
}

absl::StatusOr<ModelShape> ShapeFromConfigJson(const nlohmann::json& config) {
  if (!config.is_object()) {
    return absl::InvalidArgumentError("config.json: the top level is not a JSON object");
  }
  Source src{"config.json", ""};
  const json& cfg = *LanguageModelConfig(config, &src.prefix);

  ModelShape s;
  s.architecture = StringField(cfg, "model_type");
  if (s.architecture.empty()) s.architecture = StringField(config, "model_type");
  if (s.architecture.empty()) {
    auto it = config.find("architectures");
    if (it != config.end() && it->is_array() && !it->empty() && (*it)[0].is_string()) {
      s.architecture = (*it)[0].get<std::string>();
    }
  }
  if (!src.prefix.empty()) {
    std::string outer = StringField(config, "model_type");
    s.notes.push_back(absl::StrCat("multimodal config", outer.empty() ? "" : " (" + outer + ")",
                                   ": shape read from ",
                                   src.prefix.substr(0, src.prefix.size() - 1),
                                   "; the vision/audio tower adds weights but no KV cache"));
  }

  ASSIGN_OR_RETURN(
      s.layers, RequiredUint(src, cfg, {"num_hidden_layers", "n_layer", "num_layers", "n_layers"}));
  RETURN_IF_ERROR(CheckLayers(src, "num_hidden_layers", s.layers));
  ASSIGN_OR_RETURN(s.hidden, RequiredUint(src, cfg, {"hidden_size", "n_embd", "d_model"}));
  RETURN_IF_ERROR(CheckPositive(src, "hidden_size", s.hidden));
  ASSIGN_OR_RETURN(std::optional<uint64_t> context,
                   OptionalUint(src, cfg,
                                {"max_position_embeddings", "n_positions", "max_sequence_length",
                                 "seq_length", "n_ctx"}));
  s.context = context.value_or(0);
  ASSIGN_OR_RETURN(std::optional<uint64_t> vocab,
                   OptionalUint(src, cfg, {"vocab_size", "padded_vocab_size"}));
  s.vocab = vocab.value_or(0);

  ASSIGN_OR_RETURN(std::optional<uint64_t> heads,
                   OptionalUint(src, cfg, {"num_attention_heads", "n_head", "num_heads"}));
  std::string arch_lower = absl::AsciiStrToLower(s.architecture);
  if (IsPureStateSpaceModel(arch_lower)) {
    // A pure state-space model: no attention, no KV cache, only a fixed per-sequence state.
    s.layer_types.assign(s.layers, absl::StrContains(arch_lower, "rwkv") ? "rwkv" : "mamba");
    s.kv_heads_per_layer.assign(s.layers, 0);
    FinishShape(s);
    return s;
  }
  if (!heads.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(src.document, ": missing ", src.Key("num_attention_heads")));
  }
  s.heads = *heads;
  RETURN_IF_ERROR(CheckPositive(src, "num_attention_heads", s.heads));

  ASSIGN_OR_RETURN(std::optional<uint64_t> kv,
                   OptionalUint(src, cfg, {"num_key_value_heads", "num_kv_heads", "n_head_kv"}));
  if (!kv.has_value()) {
    auto mq = cfg.find("multi_query");
    if (mq != cfg.end() && mq->is_boolean() && mq->get<bool>()) kv = 1;
  }
  s.kv_heads = kv.value_or(s.heads);
  RETURN_IF_ERROR(CheckPositive(src, "num_key_value_heads", s.kv_heads));

  ASSIGN_OR_RETURN(std::optional<uint64_t> head_dim, OptionalUint(src, cfg, {"head_dim"}));
  if (!head_dim.has_value()) {
    if (s.hidden % s.heads != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(src.document, ": ", src.Key("hidden_size"), " ", s.hidden,
                       " is not a multiple of ", src.Key("num_attention_heads"), " ", s.heads,
                       " and ", src.Key("head_dim"), " is not given"));
    }
    head_dim = s.hidden / s.heads;
  }
  RETURN_IF_ERROR(CheckPositive(src, "head_dim", *head_dim));
  s.head_dim_k = *head_dim;
  s.head_dim_v = *head_dim;

  ASSIGN_OR_RETURN(std::optional<uint64_t> lora, OptionalUint(src, cfg, {"kv_lora_rank"}));
  if (lora.has_value()) {
    ASSIGN_OR_RETURN(uint64_t rope, RequiredUint(src, cfg, {"qk_rope_head_dim"}));
    ASSIGN_OR_RETURN(std::optional<uint64_t> nope, OptionalUint(src, cfg, {"qk_nope_head_dim"}));
    ASSIGN_OR_RETURN(std::optional<uint64_t> v_dim, OptionalUint(src, cfg, {"v_head_dim"}));
    s.mla = true;
    s.kv_lora_rank = *lora;
    s.rope_head_dim = rope;
    ASSIGN_OR_RETURN(s.mla_kv_dim,
                     CheckedSum(src, "kv_lora_rank", *lora, "qk_rope_head_dim", rope));
    RETURN_IF_ERROR(CheckPositive(src, "kv_lora_rank", s.mla_kv_dim));
    if (nope.has_value()) {
      ASSIGN_OR_RETURN(s.head_dim_k,
                       CheckedSum(src, "qk_nope_head_dim", *nope, "qk_rope_head_dim", rope));
    }
    if (v_dim.has_value()) s.head_dim_v = *v_dim;
  }

  bool explicit_types = false;
  ASSIGN_OR_RETURN(s.layer_types, ConfigLayerTypes(src, cfg, s.layers, &explicit_types));

  ASSIGN_OR_RETURN(std::optional<uint64_t> window, OptionalUint(src, cfg, {"sliding_window"}));
  auto use_window = cfg.find("use_sliding_window");
  if (window.has_value() && use_window != cfg.end() && use_window->is_boolean() &&
      !use_window->get<bool>()) {
    s.notes.push_back(absl::StrCat(src.Key("sliding_window"), " ", WithCommas(*window),
                                   " is ignored: use_sliding_window is false"));
    window.reset();
  }
  if (window.has_value() && *window > 0) {
    s.sliding_window = window;
    if (!explicit_types) {
      ASSIGN_OR_RETURN(std::optional<uint64_t> pattern,
                       OptionalUint(src, cfg, {"sliding_window_pattern"}));
      ApplySlidingPattern(s.layer_types, pattern.value_or(DefaultSlidingPattern(arch_lower)));
    }
  }

  s.kv_heads_per_layer.assign(s.layers, s.kv_heads);
  FinishShape(s);
  return s;
}

absl::StatusOr<ModelShape> ShapeFromGgufMetadata(const nlohmann::json& kv) {
  if (!kv.is_object()) {
    return absl::InvalidArgumentError("GGUF metadata: not a JSON object of key -> value");
  }
  Source src{"GGUF metadata", ""};
  auto arch_it = kv.find("general.architecture");
  if (arch_it == kv.end() || !arch_it->is_string()) {
    return absl::InvalidArgumentError("GGUF metadata: missing general.architecture");
  }
  ModelShape s;
  s.architecture = arch_it->get<std::string>();
  const std::string a = s.architecture + ".";
  auto key = [&](const char* k) { return a + k; };
  // Looks up one architecture-scoped key (the Source prefix stays empty: keys are already full).
  auto opt = [&](const char* k) -> absl::StatusOr<std::optional<uint64_t>> {
    std::string full = key(k);
    auto it = kv.find(full);
    if (it == kv.end() || it->is_null()) return std::optional<uint64_t>();
    ASSIGN_OR_RETURN(uint64_t n, AsUint(src, full, *it));
    return std::optional<uint64_t>(n);
  };
  auto req = [&](const char* k) -> absl::StatusOr<uint64_t> {
    ASSIGN_OR_RETURN(std::optional<uint64_t> v, opt(k));
    if (!v.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("GGUF metadata: missing ", key(k)));
    }
    return *v;
  };
  // A scalar applied to every layer, or an array with one entry per layer.
  auto per_layer = [&](const char* k, std::vector<uint64_t>* out) -> absl::StatusOr<bool> {
    std::string full = key(k);
    auto it = kv.find(full);
    if (it == kv.end() || it->is_null()) return false;
    if (it->is_array()) {
      if (it->size() != s.layers) {
        return absl::InvalidArgumentError(absl::StrCat("GGUF metadata: ", full, " has ", it->size(),
                                                       " entries but ", key("block_count"), " is ",
                                                       s.layers));
      }
      out->clear();
      for (size_t i = 0; i < it->size(); ++i) {
        ASSIGN_OR_RETURN(uint64_t n, AsUint(src, absl::StrCat(full, "[", i, "]"), (*it)[i]));
        out->push_back(n);
      }
    } else {
      ASSIGN_OR_RETURN(uint64_t n, AsUint(src, full, *it));
      out->assign(s.layers, n);
    }
    return true;
  };

  ASSIGN_OR_RETURN(s.layers, req("block_count"));
  RETURN_IF_ERROR(CheckLayers(src, key("block_count"), s.layers));
  ASSIGN_OR_RETURN(s.hidden, req("embedding_length"));
  RETURN_IF_ERROR(CheckPositive(src, key("embedding_length"), s.hidden));
  ASSIGN_OR_RETURN(std::optional<uint64_t> context, opt("context_length"));
  s.context = context.value_or(0);
  ASSIGN_OR_RETURN(std::optional<uint64_t> vocab, opt("vocab_size"));
  if (!vocab.has_value()) {
    auto count = kv.find("tokenizer.ggml.tokens_count");
    auto tokens = kv.find("tokenizer.ggml.tokens");
    if (count != kv.end() && !count->is_null()) {
      ASSIGN_OR_RETURN(vocab, AsUint(src, "tokenizer.ggml.tokens_count", *count));
    } else if (tokens != kv.end() && tokens->is_array()) {
      vocab = tokens->size();
    }
  }
  s.vocab = vocab.value_or(0);

  std::vector<uint64_t> heads;
  ASSIGN_OR_RETURN(bool have_heads, per_layer("attention.head_count", &heads));
  if (!have_heads) {
    ASSIGN_OR_RETURN(std::optional<uint64_t> ssm_state, opt("ssm.state_size"));
    if (ssm_state.has_value() || IsPureStateSpaceModel(absl::AsciiStrToLower(s.architecture))) {
      s.layer_types.assign(s.layers, "recurrent");
      s.kv_heads_per_layer.assign(s.layers, 0);
      FinishShape(s);
      return s;
    }
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF metadata: missing ", key("attention.head_count")));
  }
  s.heads = *std::max_element(heads.begin(), heads.end());
  RETURN_IF_ERROR(CheckPositive(src, key("attention.head_count"), s.heads));

  ASSIGN_OR_RETURN(bool have_kv, per_layer("attention.head_count_kv", &s.kv_heads_per_layer));
  if (!have_kv) s.kv_heads_per_layer = heads;
  s.kv_heads = *std::max_element(s.kv_heads_per_layer.begin(), s.kv_heads_per_layer.end());

  ASSIGN_OR_RETURN(std::optional<uint64_t> key_length, opt("attention.key_length"));
  ASSIGN_OR_RETURN(std::optional<uint64_t> value_length, opt("attention.value_length"));
  if (!key_length.has_value() || !value_length.has_value()) {
    if (s.hidden % s.heads != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("GGUF metadata: ", key("embedding_length"), " ", s.hidden,
                       " is not a multiple of ", key("attention.head_count"), " ", s.heads, " and ",
                       key("attention.key_length"), " is not given"));
    }
  }
  s.head_dim_k = key_length.value_or(s.hidden / s.heads);
  s.head_dim_v = value_length.value_or(s.hidden / s.heads);
  RETURN_IF_ERROR(CheckPositive(src, key("attention.key_length"), s.head_dim_k));
  RETURN_IF_ERROR(CheckPositive(src, key("attention.value_length"), s.head_dim_v));

  ASSIGN_OR_RETURN(std::optional<uint64_t> lora, opt("attention.kv_lora_rank"));
  if (lora.has_value()) {
    ASSIGN_OR_RETURN(uint64_t rope, req("rope.dimension_count"));
    s.mla = true;
    s.kv_lora_rank = *lora;
    s.rope_head_dim = rope;
    ASSIGN_OR_RETURN(s.mla_kv_dim, CheckedSum(src, key("attention.kv_lora_rank"), *lora,
                                              key("rope.dimension_count"), rope));
    RETURN_IF_ERROR(CheckPositive(src, key("attention.kv_lora_rank"), s.mla_kv_dim));
    // Newer converters write the absorbed (latent) sizes as key_length and the per-head ones
    // as *_mla; show the per-head ones.
    ASSIGN_OR_RETURN(std::optional<uint64_t> k_mla, opt("attention.key_length_mla"));
    ASSIGN_OR_RETURN(std::optional<uint64_t> v_mla, opt("attention.value_length_mla"));
    if (k_mla.has_value()) s.head_dim_k = *k_mla;
    if (v_mla.has_value()) s.head_dim_v = *v_mla;
  }

  s.layer_types.assign(s.layers, kFullAttention);
  for (uint64_t i = 0; i < s.layers; ++i) {
    if (s.kv_heads_per_layer[i] == 0) s.layer_types[i] = "recurrent";
  }
  ASSIGN_OR_RETURN(std::optional<uint64_t> window, opt("attention.sliding_window"));
  if (window.has_value() && *window > 0) {
    s.sliding_window = window;
    std::string pattern_key = key("attention.sliding_window_pattern");
    auto pattern = kv.find(pattern_key);
    if (pattern != kv.end() && pattern->is_array()) {
      // One boolean per layer: true where the layer uses the window.
      if (pattern->size() != s.layers) {
        return absl::InvalidArgumentError(absl::StrCat("GGUF metadata: ", pattern_key, " has ",
                                                       pattern->size(), " entries but ",
                                                       key("block_count"), " is ", s.layers));
      }
      for (uint64_t i = 0; i < s.layers; ++i) {
        const json& e = (*pattern)[i];
        if (!e.is_boolean()) {
          return absl::InvalidArgumentError(absl::StrCat("GGUF metadata: ", pattern_key, "[", i,
                                                         "] is ", e.dump(), ", not a boolean"));
        }
        if (e.get<bool>() && s.layer_types[i] == kFullAttention) {
          s.layer_types[i] = kSlidingAttention;
        }
      }
    } else {
      ASSIGN_OR_RETURN(std::optional<uint64_t> n, opt("attention.sliding_window_pattern"));
      // llama.cpp's convention: layer i slides when i % n < n - 1.
      ApplySlidingPattern(s.layer_types, n.value_or(DefaultSlidingPattern(s.architecture)));
    }
  }
  FinishShape(s);
  return s;
}

nlohmann::json ModelShapeToJson(const ModelShape& s) {
  json j = {
      {"architecture", s.architecture},
      {"layers", s.layers},
      {"attention_layers", s.attention_layers},
      {"heads", s.heads},
      {"kv_heads", s.kv_heads},
      {"head_dim_k", s.head_dim_k},
      {"head_dim_v", s.head_dim_v},
      {"hidden", s.hidden},
      {"context", s.context},
      {"vocab", s.vocab},
      {"mla", s.mla},
      {"kv_heads_per_layer", s.kv_heads_per_layer},
      {"layer_types", s.layer_types},
      {"notes", s.notes},
  };
  j["sliding_window"] = s.sliding_window.has_value() ? json(*s.sliding_window) : json(nullptr);
  if (s.mla) {
    j["mla_kv_dim"] = s.mla_kv_dim;
    j["kv_lora_rank"] = s.kv_lora_rank;
    j["rope_head_dim"] = s.rope_head_dim;
  }
  return j;
}

}  // namespace modelfs
