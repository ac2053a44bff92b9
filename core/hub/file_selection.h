// Which files of a Hub repository `modelfs fetch` downloads, and which file names are pickle
// checkpoints or tokenizer files (the rules `push` and the identity record use too).
//
// Globs are fnmatch(3) patterns matched against the whole relative path, where "*" also
// matches "/" (so "*.json" matches "sub/x.json"), as huggingface_hub's allow_patterns do; a
// pattern ending in "/" matches everything under that directory.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/formats/pickle_scan.h"

namespace modelfs {

// The default selection: *.json, tokenizer files (IsTokenizerFile), *.safetensors, *.gguf,
// *.txt, *.md, and LICENSE*/LICENCE*/NOTICE*/USE_POLICY* (the license is part of what a model
// is); never a pickle file (IsPickleFileName). With allow_remote_code also *.py (the code
// config.json's auto_map names).
bool MatchesDefaultFetchPatterns(std::string_view path, bool allow_remote_code);

bool GlobMatch(std::string_view pattern, std::string_view path);
bool MatchesAnyGlob(const std::vector<std::string>& patterns, std::string_view path);

// IsPickleFileName (the names fetch never takes without allow_pickle) is in
// core/formats/pickle_scan.h.

// Tokenizer files, by base name: tokenizer* (tokenizer.json, tokenizer_config.json,
// tokenizer.model), special_tokens_map.json, added_tokens.json, vocab.*, merges.txt,
// spiece.model, sentencepiece*.model, *.tiktoken, chat_template.json and *.jinja.
bool IsTokenizerFile(std::string_view path);

}  // namespace modelfs
