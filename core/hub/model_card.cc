#include "core/hub/model_card.h"

#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace modelfs {
namespace {

constexpr size_t kMaxFrontMatter = 256 << 10;

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// A plain or quoted scalar, with a trailing " # comment" removed from plain ones.
std::string Scalar(absl::string_view v) {
  v = absl::StripAsciiWhitespace(v);
  if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'')) {
    const char q = v.front();
    const size_t end = v.find(q, 1);
    if (end != absl::string_view::npos) return std::string(v.substr(1, end - 1));
  }
  const size_t hash = v.find(" #");
  if (hash != absl::string_view::npos) v = absl::StripAsciiWhitespace(v.substr(0, hash));
  return std::string(v);
}

std::vector<std::string> InlineList(absl::string_view v) {
  std::vector<std::string> out;
  v = absl::StripAsciiWhitespace(v);
  if (v.size() < 2 || v.front() != '[' || v.back() != ']') return out;
  for (absl::string_view item : absl::StrSplit(v.substr(1, v.size() - 2), ',')) {
    std::string s = Scalar(item);
    if (!s.empty()) out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

ModelCard ParseModelCard(std::string_view readme_sv) {
  ModelCard card;
  absl::string_view readme = AV(readme_sv);
  absl::ConsumePrefix(&readme, "\xEF\xBB\xBF");  // a UTF-8 byte order mark
  if (!absl::ConsumePrefix(&readme, "---")) return card;
  const size_t first_nl = readme.find('\n');
  if (first_nl == absl::string_view::npos ||
      !absl::StripAsciiWhitespace(readme.substr(0, first_nl)).empty()) {
    return card;
  }
  readme = readme.substr(first_nl + 1);
  std::map<std::string, std::vector<std::string>> values;  // key -> scalar or items
  std::string list_key;                                    // the key whose "- item" lines follow
  bool closed = false;
  size_t consumed = 0;
  for (absl::string_view raw : absl::StrSplit(readme, '\n')) {
    consumed += raw.size() + 1;
    if (consumed > kMaxFrontMatter) break;
    absl::string_view line = absl::StripTrailingAsciiWhitespace(raw);
    if (line == "---" || line == "...") {
      closed = true;
      break;
    }
    if (line.empty() || absl::StartsWith(absl::StripLeadingAsciiWhitespace(line), "#")) continue;
    const bool indented = line.front() == ' ' || line.front() == '\t';
    absl::string_view body = absl::StripLeadingAsciiWhitespace(line);
    if (absl::StartsWith(body, "- ") || body == "-") {
      // A list item: at the top level or indented under its key; nested mappings skipped.
      if (list_key.empty()) continue;
      absl::string_view item = body.substr(1);
      if (item.find(": ") != absl::string_view::npos) {
        list_key.clear();  // a list of mappings (model-index): not for us
        continue;
      }
      std::string s = Scalar(item);
      if (!s.empty()) values[list_key].push_back(std::move(s));
      continue;
    }
    if (indented) continue;  // inside a nested mapping
    const size_t colon = body.find(':');
    if (colon == absl::string_view::npos) {
      list_key.clear();
      continue;
    }
    const std::string key(absl::StripAsciiWhitespace(body.substr(0, colon)));
    absl::string_view value = absl::StripAsciiWhitespace(body.substr(colon + 1));
    list_key.clear();
    if (value.empty()) {
      list_key = key;
      values[key];  // present, maybe empty
    } else if (value.front() == '[') {
      values[key] = InlineList(value);
    } else {
      values[key] = {Scalar(value)};
    }
  }
  if (!closed) return card;  // not front matter after all
  card.has_front_matter = true;
  auto first = [&](const char* key) {
    auto it = values.find(key);
    return it == values.end() || it->second.empty() ? std::string() : it->second.front();
  };
  card.license = first("license");
  card.license_name = first("license_name");
  card.base_model_relation = first("base_model_relation");
  if (auto it = values.find("base_model"); it != values.end()) card.base_models = it->second;
  if (auto it = values.find("datasets"); it != values.end()) card.datasets = it->second;
  return card;
}

std::string HubLicenseToSpdx(std::string_view license_sv, std::string_view license_name) {
  static const auto* kSpdx = new std::map<std::string, std::string>{
      {"apache-2.0", "Apache-2.0"},
      {"mit", "MIT"},
      {"afl-3.0", "AFL-3.0"},
      {"artistic-2.0", "Artistic-2.0"},
      {"bsl-1.0", "BSL-1.0"},
      {"bsd-2-clause", "BSD-2-Clause"},
      {"bsd-3-clause", "BSD-3-Clause"},
      {"bsd-3-clause-clear", "BSD-3-Clause-Clear"},
      {"cc0-1.0", "CC0-1.0"},
      {"cc-by-2.0", "CC-BY-2.0"},
      {"cc-by-2.5", "CC-BY-2.5"},
      {"cc-by-3.0", "CC-BY-3.0"},
      {"cc-by-4.0", "CC-BY-4.0"},
      {"cc-by-sa-3.0", "CC-BY-SA-3.0"},
      {"cc-by-sa-4.0", "CC-BY-SA-4.0"},
      {"cc-by-nc-2.0", "CC-BY-NC-2.0"},
      {"cc-by-nc-3.0", "CC-BY-NC-3.0"},
      {"cc-by-nc-4.0", "CC-BY-NC-4.0"},
      {"cc-by-nd-4.0", "CC-BY-ND-4.0"},
      {"cc-by-nc-nd-3.0", "CC-BY-NC-ND-3.0"},
      {"cc-by-nc-nd-4.0", "CC-BY-NC-ND-4.0"},
      {"cc-by-nc-sa-2.0", "CC-BY-NC-SA-2.0"},
      {"cc-by-nc-sa-3.0", "CC-BY-NC-SA-3.0"},
      {"cc-by-nc-sa-4.0", "CC-BY-NC-SA-4.0"},
      {"cdla-sharing-1.0", "CDLA-Sharing-1.0"},
      {"cdla-permissive-1.0", "CDLA-Permissive-1.0"},
      {"cdla-permissive-2.0", "CDLA-Permissive-2.0"},
      {"ecl-2.0", "ECL-2.0"},
      {"epl-1.0", "EPL-1.0"},
      {"epl-2.0", "EPL-2.0"},
      {"etalab-2.0", "etalab-2.0"},
      {"eupl-1.1", "EUPL-1.1"},
      {"eupl-1.2", "EUPL-1.2"},
      {"agpl-3.0", "AGPL-3.0-only"},
      {"gpl-2.0", "GPL-2.0-only"},
      {"gpl-3.0", "GPL-3.0-only"},
      {"lgpl-2.1", "LGPL-2.1-only"},
      {"lgpl-3.0", "LGPL-3.0-only"},
      {"lgpl-lr", "LGPLLR"},
      {"isc", "ISC"},
      {"lppl-1.3c", "LPPL-1.3c"},
      {"ms-pl", "MS-PL"},
      {"mpl-2.0", "MPL-2.0"},
      {"odc-by", "ODC-By-1.0"},
      {"odbl", "ODbL-1.0"},
      {"pddl", "PDDL-1.0"},
      {"unlicense", "Unlicense"},
      {"wtfpl", "WTFPL"},
      {"zlib", "Zlib"},
  };
  const std::string license = absl::AsciiStrToLower(absl::StripAsciiWhitespace(AV(license_sv)));
  if (license.empty()) return "";
  if (auto it = kSpdx->find(license); it != kSpdx->end()) return it->second;
  // LicenseRef-<idstring>: letters, digits, "." and "-" only.
  auto ref = [](std::string_view id) {
    std::string out = "LicenseRef-";
    for (char c : id) {
      out.push_back(
          absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ? c : '-');
    }
    return out;
  };
  if (license == "other" && !license_name.empty()) return ref(license_name);
  return ref(license);
}

}  // namespace modelfs
