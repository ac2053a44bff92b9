#include "core/oci/tensor_diff.h"

#include <map>

namespace modelfs {

TensorDiff DiffTensors(const std::vector<TensorFileView>& a, const std::vector<TensorFileView>& b) {
  std::map<std::string, std::pair<const TensorFileView*, const TensorFileView*>> by_path;
  for (const TensorFileView& f : a) by_path[f.path].first = &f;
  for (const TensorFileView& f : b) by_path[f.path].second = &f;
  TensorDiff out;
  static const TensorFileView kEmpty;
  for (const auto& [path, pair] : by_path) {
    TensorFileDiff fd;
    fd.path = path;
    fd.in_a = pair.first != nullptr;
    fd.in_b = pair.second != nullptr;
    const TensorFileView& fa = pair.first ? *pair.first : kEmpty;
    const TensorFileView& fb = pair.second ? *pair.second : kEmpty;
    std::map<std::string_view, const TensorEntry*> in_b;
    for (const TensorEntry& t : fb.tensors) in_b[t.name] = &t;
    std::map<std::string_view, bool> in_a;
    for (const TensorEntry& t : fa.tensors) {
      in_a[t.name] = true;
      auto it = in_b.find(t.name);
      if (it == in_b.end()) {
        fd.removed.push_back(t.name);
        continue;
      }
      const TensorEntry& u = *it->second;
      TensorChange c{t.name, t, u, t.dtype != u.dtype, t.shape != u.shape, t.hash != u.hash};
      if (c.dtype || c.shape || c.digest) {
        fd.changed.push_back(std::move(c));
      } else {
        fd.identical.push_back(t.name);
      }
    }
    for (const TensorEntry& t : fb.tensors) {
      if (!in_a.count(t.name)) fd.added.push_back(t.name);
    }
    out.added += fd.added.size();
    out.removed += fd.removed.size();
    out.changed += fd.changed.size();
    out.identical += fd.identical.size();
    out.files.push_back(std::move(fd));
  }
  return out;
}

}  // namespace modelfs
