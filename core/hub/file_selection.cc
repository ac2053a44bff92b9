#include "core/hub/file_selection.h"

#include <fnmatch.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "core/text/base_name.h"

namespace modelfs {
namespace {

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string LowerBaseName(std::string_view path) { return absl::AsciiStrToLower(BaseName(path)); }

bool EndsWithAny(std::string_view s, std::initializer_list<std::string_view> suffixes) {
  for (std::string_view x : suffixes) {
    if (absl::EndsWith(AV(s), AV(x))) return true;
  }
  return false;
}

bool StartsWithAny(std::string_view s, std::initializer_list<std::string_view> prefixes) {
  for (std::string_view x : prefixes) {
    if (absl::StartsWith(AV(s), AV(x))) return true;
  }
  return false;
}

}  // namespace

bool MatchesDefaultFetchPatterns(std::string_view path, bool allow_remote_code) {
  if (IsPickleFileName(path)) return false;
  const std::string lower = absl::AsciiStrToLower(AV(path));
  if (EndsWithAny(lower, {".json", ".safetensors", ".gguf", ".txt", ".md"})) return true;
  if (IsTokenizerFile(path)) return true;
  const std::string base = LowerBaseName(path);
  if (StartsWithAny(base, {"license", "licence", "notice", "use_policy"})) return true;
  return allow_remote_code && absl::EndsWith(lower, ".py");
}

bool GlobMatch(std::string_view pattern, std::string_view path) {
  std::string p(pattern);
  if (!p.empty() && p.back() == '/') p += "*";
  const std::string s(path);
  return fnmatch(p.c_str(), s.c_str(), 0) == 0;
}

bool MatchesAnyGlob(const std::vector<std::string>& patterns, std::string_view path) {
  for (const std::string& p : patterns) {
    if (GlobMatch(p, path)) return true;
  }
  return false;
}

bool IsTokenizerFile(std::string_view path) {
  const std::string base = LowerBaseName(path);
  if (StartsWithAny(base, {"tokenizer", "vocab.", "sentencepiece"})) {
    return !absl::StartsWith(base, "sentencepiece") || absl::EndsWith(base, ".model");
  }
  return base == "special_tokens_map.json" || base == "added_tokens.json" || base == "merges.txt" ||
         base == "spiece.model" || base == "chat_template.json" ||
         EndsWithAny(base, {".tiktoken", ".jinja"});
}

}  // namespace modelfs
