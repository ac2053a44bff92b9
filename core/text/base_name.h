// BaseName: the last component of a '/'-separated path, for paths inside a model (a layer's
// file path, an artifact's file name, a Hub repository path) where only the name decides what
// the file is. Works on the text alone: no file system, no "." or ".." handling.
//
// Thread safety: a pure function.
#pragma once

#include <string>
#include <string_view>

namespace modelfs {

// Everything after the last '/': "a/b/c.gguf" -> "c.gguf", "c.gguf" -> "c.gguf", "" -> "",
// and a path ending in '/' names no file: "a/b/" -> "".
std::string BaseName(std::string_view path);

// BaseName of a location that may be a URL: its query and fragment are not part of the file
// name. "https://h/m/model.gguf?download=1" -> "model.gguf", "dir/a.safetensors" ->
// "a.safetensors".
std::string LocationBaseName(std::string_view location);

}  // namespace modelfs
