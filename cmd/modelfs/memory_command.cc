// `modelfs memory FILE|DIR|config.json [...]`: weights plus KV cache, and what fits on a GPU.
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cmd/modelfs/cli.h"
#include "cmd/modelfs/memory_render.h"
#include "core/formats/memory.h"
#include "core/formats/model_inspect.h"
#include "core/status/status_macros.h"

namespace modelfs::cli {
namespace {

struct MemoryCliOptions {
  std::vector<std::string> paths;
  std::string params;
  std::vector<std::string> quants;
  uint64_t ctx = 0;
  uint64_t seqs = 1;
  std::vector<std::string> kv_types;
  double gpu_gib = 0;
  double utilization = kDefaultGpuUtilization;
  bool json = false;
};

std::vector<std::string> SplitList(const std::vector<std::string>& in) {
  std::vector<std::string> out;
  for (const auto& s : in) {
    for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipEmpty())) {
      out.emplace_back(part);
    }
  }
  return out;
}

absl::Status RunMemory(const MemoryCliOptions& o) {
  if (o.seqs == 0) return absl::InvalidArgumentError("--seqs must be at least 1");
  if (o.utilization <= 0 || o.utilization > 1) {
    return absl::InvalidArgumentError("--utilization must be in (0, 1]");
  }
  if (o.gpu_gib < 0) return absl::InvalidArgumentError("--gpu-gib must not be negative");
  ASSIGN_OR_RETURN(InspectedModel model, InspectModel(o.paths));
  if (!model.shape) {
    std::string why = model.warnings.empty() ? "" : absl::StrCat(": ", model.warnings.front());
    for (const auto& f : model.files) {
      if (!f.warnings.empty()) why = absl::StrCat(": ", f.warnings.front());
    }
    return absl::InvalidArgumentError(
        absl::StrCat("no model shape (layers, heads) found in ", o.paths.front(),
                     "; give a GGUF file or a directory/file list with config.json", why));
  }
  MemoryRequest req;
  req.shape = *model.shape;
  if (!o.params.empty()) {
    ASSIGN_OR_RETURN(uint64_t p, ParseParamCount(o.params));
    req.params = p;
  } else if (model.parameters > 0) {
    req.params = model.parameters;
  }
  req.quants = SplitList(o.quants);
  if (!model.files.empty()) {
    req.file_tensor_bytes = model.tensor_bytes;
    req.file_label = model.files.size() == 1 ? model.files[0].location : "model files";
    if (!model.precision.empty()) req.file_label += " (" + model.precision + ")";
  }
  req.ctx = o.ctx;
  req.seqs = o.seqs;
  std::vector<std::string> kv = SplitList(o.kv_types);
  if (!kv.empty()) req.kv_types = kv;
  if (o.gpu_gib > 0) req.gpu_gib = o.gpu_gib;
  req.utilization = o.utilization;
  ASSIGN_OR_RETURN(MemoryReport report, ComputeMemoryReport(req));
  if (o.json) {
    printf("%s\n", MemoryReportToJson(report).dump(2).c_str());
  } else {
    printf("%s", RenderMemoryReport(report).c_str());
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterMemory(CLI::App& app, Context& ctx) {
  auto o = std::make_shared<MemoryCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "memory",
      "Serving memory: weight bytes per format, KV cache per token and in total, and "
      "how many tokens fit on a GPU");
  cmd->add_option("PATH", o->paths, "GGUF / safetensors file, model directory, or config.json")
      ->required();
  cmd->add_option("--params", o->params,
                  "Parameter count (8.03e9, 8B, 134.5M); default: from the file");
  cmd->add_option("--quant", o->quants,
                  "Weight format(s) to size (Q4_K, Q8_0, BF16, ...; comma-separated)");
  cmd->add_option("--ctx", o->ctx,
                  "Context length in tokens (default: the model's trained context)");
  cmd->add_option("--seqs", o->seqs, "Concurrent sequences")->default_val(1);
  cmd->add_option("--kv-type", o->kv_types, "KV cache dtype(s): f16, bf16, fp8, q8_0, q4_0")
      ->default_str("f16");
  cmd->add_option("--gpu-gib", o->gpu_gib, "GPU memory in GiB");
  cmd->add_option("--utilization", o->utilization, "Fraction of GPU memory usable (vLLM's default)")
      ->default_val(kDefaultGpuUtilization);
  cmd->add_flag("--json", o->json, "Print JSON (byte counts as plain integers)");
  cmd->callback([o, &ctx] { ctx.status = RunMemory(*o); });
}

}  // namespace modelfs::cli
