// `modelfs inspect --tensors REF` and `modelfs diff REF_A REF_B`: a model's tensors from the
// tensor index its volume image pins (docs/tensor-index.md), else from the files' headers and
// the layers hashed once; the logic is core/publish/tensor_listing.h.
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cmd/modelfs/cli.h"
#include "core/publish/tensor_listing.h"
#include "core/status/status_macros.h"
#include "core/text/escape.h"

namespace modelfs::cli {
namespace {

std::string ShapeText(const std::vector<uint64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

std::string SourceText(const ModelTensors& m) {
  std::string out;
  bool hashed = false, index = false;
  for (const ModelTensorFile& f : m.files) {
    hashed = hashed || f.source == TensorSource::kHeaderHashed;
    index = index || f.source != TensorSource::kHeaderHashed;
  }
  if (index && !hashed) return "index";
  if (m.files.empty()) return "none";
  return absl::StrCat(index ? "index, " : "", "headers+hashed ", WithCommas(m.hashed_bytes),
                      " bytes");
}

struct Side {
  std::unique_ptr<RegistryClient> client;
  ResolvedModel rm;
  uint64_t bytes_before = 0;
};

absl::StatusOr<Side> Resolve(const std::string& arg, const RegistryAccessOptions& access) {
  ASSIGN_OR_RETURN(ImageReference ref, ImageReference::Parse(arg));
  Side s;
  ASSIGN_OR_RETURN(s.client, ConnectRegistry(ref, HostCapability::kPull, access));
  ASSIGN_OR_RETURN(s.rm, ResolveModel(*s.client, ref, nullptr, NotingLocation(ref)));
  return s;
}

struct DiffCliOptions {
  std::string a, b;
  RegistryFlags reg;
};

absl::Status RunDiff(const DiffCliOptions& o) {
  const RegistryAccessOptions access = AccessOptions(o.reg);
  ASSIGN_OR_RETURN(Side a, Resolve(o.a, access));
  ASSIGN_OR_RETURN(Side b, Resolve(o.b, access));
  ASSIGN_OR_RETURN(ModelTensors ta, ListModelTensors(*a.client, a.rm));
  // B's files of a layer A listed already are not read again.
  ASSIGN_OR_RETURN(ModelTensors tb, ListModelTensors(*b.client, b.rm, &ta));
  const uint64_t read_a = a.client->stats().bytes_received;
  const uint64_t read_b = b.client->stats().bytes_received;
  const TensorDiff d = DiffModelTensors(ta, tb);
  if (o.reg.json) {
    nlohmann::json j = TensorDiffToJson(d);
    auto side = [](const ModelTensors& m, uint64_t read) {
      nlohmann::json sources = nlohmann::json::object();
      for (const ModelTensorFile& f : m.files) {
        sources[f.path] = std::string(TensorSourceName(f.source));
      }
      return nlohmann::json{
          {"reference", m.reference},
          {"model", m.model.str()},
          {"volume", m.volume ? nlohmann::json(m.volume->str()) : nlohmann::json(nullptr)},
          {"source", SourceText(m)},
          {"sources", sources},
          {"skipped", m.skipped},
          {"hashed_bytes", m.hashed_bytes},
          {"bytes_read", read}};
    };
    j["a"] = side(ta, read_a);
    j["b"] = side(tb, read_b);
    j["bytes_read"] = read_a + read_b;
    printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return absl::OkStatus();
  }
  printf("a: %s (source: %s, read %s bytes)\n", EscapeUntrusted(ta.reference).c_str(),
         SourceText(ta).c_str(), WithCommas(read_a).c_str());
  printf("b: %s (source: %s, read %s bytes)\n", EscapeUntrusted(tb.reference).c_str(),
         SourceText(tb).c_str(), WithCommas(read_b).c_str());
  for (const TensorFileDiff& f : d.files) {
    const char* where = !f.in_a ? " (only in b)" : !f.in_b ? " (only in a)" : "";
    printf("%s%s: %zu added, %zu removed, %zu changed, %zu identical\n",
           EscapeUntrusted(f.path).c_str(), where, f.added.size(), f.removed.size(),
           f.changed.size(), f.identical.size());
    for (const std::string& n : f.added) printf("  + %s\n", EscapeUntrusted(n).c_str());
    for (const std::string& n : f.removed) printf("  - %s\n", EscapeUntrusted(n).c_str());
    for (const TensorChange& c : f.changed) {
      std::vector<std::string> what;
      if (c.dtype) what.push_back(absl::StrCat("dtype ", c.a.dtype, " -> ", c.b.dtype));
      if (c.shape) {
        what.push_back(absl::StrCat("shape ", ShapeText(c.a.shape), " -> ", ShapeText(c.b.shape)));
      }
      if (c.digest) what.push_back("digest");
      printf("  ~ %s (%s)\n", EscapeUntrusted(c.name).c_str(),
             EscapeUntrusted(absl::StrJoin(what, ", ")).c_str());
    }
  }
  for (const std::string& s : ta.skipped)
    printf("a: not compared (not followed as a tar): %s\n", EscapeUntrusted(s).c_str());
  for (const std::string& s : tb.skipped)
    printf("b: not compared (not followed as a tar): %s\n", EscapeUntrusted(s).c_str());
  printf(
      "summary: %s added, %s removed, %s changed, %s identical; read %s bytes from the "
      "registry\n",
      WithCommas(d.added).c_str(), WithCommas(d.removed).c_str(), WithCommas(d.changed).c_str(),
      WithCommas(d.identical).c_str(), WithCommas(read_a + read_b).c_str());
  return absl::OkStatus();
}

}  // namespace

absl::Status InspectReferenceTensors(const std::string& arg, const RegistryAccessOptions& access,
                                     bool json) {
  ASSIGN_OR_RETURN(Side s, Resolve(arg, access));
  ASSIGN_OR_RETURN(ModelTensors m, ListModelTensors(*s.client, s.rm));
  const uint64_t read = s.client->stats().bytes_received;
  if (json) {
    nlohmann::json j = ModelTensorsToJson(m);
    j["source"] = SourceText(m);
    j["bytes_read"] = read;
    printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return absl::OkStatus();
  }
  printf("%s (source: %s, read %s bytes)\n", EscapeUntrusted(m.reference).c_str(),
         SourceText(m).c_str(), WithCommas(read).c_str());
  for (const ModelTensorFile& f : m.files) {
    printf("%s: %zu tensors (%s, %s)\n", EscapeUntrusted(f.path).c_str(), f.index.tensors.size(),
           std::string(TensorFileFormatName(f.index.format)).c_str(),
           std::string(TensorSourceName(f.source)).c_str());
    for (const TensorEntry& t : f.index.tensors) {
      printf("  %s %s %s offset %s length %s blake3:%s\n", EscapeUntrusted(t.name).c_str(),
             EscapeUntrusted(t.dtype).c_str(), ShapeText(t.shape).c_str(),
             WithCommas(t.offset).c_str(), WithCommas(t.length).c_str(),
             TensorHashHex(t.hash).c_str());
    }
  }
  for (const std::string& s : m.skipped) {
    printf("not listed (not followed as a tar): %s\n", EscapeUntrusted(s).c_str());
  }
  return absl::OkStatus();
}

void RegisterDiff(CLI::App& app, Context& ctx) {
  auto o = std::make_shared<DiffCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "diff",
      "Compare two models tensor by tensor (added, removed, changed dtype/shape/digest, "
      "identical), per file and in summary, from their volume images' tensor indexes; a model "
      "without one is read from its files' headers and hashed once (said in the output). "
      "Exit 0 when compared, even if they differ");
  cmd->add_option("REF_A", o->a, "First model: volume image or ModelPack artifact")->required();
  cmd->add_option("REF_B", o->b, "Second model")->required();
  AddRegistryFlags(cmd, o->reg);
  cmd->callback([o, &ctx] { ctx.status = RunDiff(*o); });
}

}  // namespace modelfs::cli
