// The pickle scan of `modelfs inspect` as JSON and as text (pickle_render.h).
#include "cmd/modelfs/pickle_render.h"

#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/text/escape.h"

namespace modelfs::cli {

namespace {

// Strings from a pickle need not be UTF-8, which JSON text must be: they are shown escaped,
// as the text output shows them.
nlohmann::json Text(const std::string& s) { return EscapeUntrusted(s); }

}  // namespace

nlohmann::json PickleScanToJson(const PickleScan& scan) {
  nlohmann::json streams = nlohmann::json::array();
  for (const PickleStream& s : scan.streams) {
    nlohmann::json imports = nlohmann::json::array();
    for (const PickleImport& i : s.imports) {
      const std::string alias = PickleGlobalAlias(i.module, i.name);
      imports.push_back({{"module", Text(i.module)},
                         {"name", Text(i.name)},
                         {"global", Text(i.Qualified())},
                         {"alias", alias.empty() ? nlohmann::json(nullptr) : Text(alias)},
                         {"opcode", i.opcode},
                         {"offset", i.offset},
                         {"allowed", i.allowed},
                         {"dangerous", i.dangerous}});
    }
    nlohmann::json calls = nlohmann::json::array();
    for (const PickleCall& c : s.calls) {
      calls.push_back({{"target", Text(c.target)}, {"opcode", c.opcode}, {"offset", c.offset}});
    }
    streams.push_back({{"name", Text(s.name)},
                       {"offset", s.offset},
                       {"size", s.size},
                       {"protocol", s.protocol},
                       {"imports", imports},
                       {"calls", calls},
                       {"error", s.error.empty() ? nlohmann::json(nullptr) : Text(s.error)}});
  }
  nlohmann::json flagged = nlohmann::json::array();
  for (const std::string& f : scan.flagged) flagged.push_back(Text(f));
  return {{"location", Text(scan.location)},
          {"format", "pickle"},
          {"kind", scan.kind},
          {"file_size", scan.file_size},
          {"streams", streams},
          {"flagged", flagged},
          {"safe", scan.safe()}};
}

std::string RenderPickleScan(const PickleScan& scan) {
  std::string out =
      absl::StrCat(EscapeUntrusted(scan.location), ": ",
                   scan.kind == "zip" ? "PyTorch zip checkpoint" : "pickle stream", ", ",
                   scan.streams.size(), scan.streams.size() == 1 ? " pickle" : " pickles", " (");
  for (size_t i = 0; i < scan.streams.size(); ++i) {
    const PickleStream& s = scan.streams[i];
    absl::StrAppend(&out, i ? "; " : "", EscapeUntrusted(s.name), ", ", s.size, " bytes",
                    s.protocol ? absl::StrCat(", protocol ", s.protocol) : "");
  }
  absl::StrAppend(&out, "), nothing executed\n");
  // One line per distinct global, with its call count, in first-seen order.
  struct Row {
    const PickleImport* first;
    int imports = 0;
    int calls = 0;
  };
  std::vector<std::string> order;
  std::map<std::string, Row> rows;
  for (const PickleStream& s : scan.streams) {
    for (const PickleImport& i : s.imports) {
      auto [it, inserted] = rows.try_emplace(i.Qualified(), Row{&i});
      if (inserted) order.push_back(i.Qualified());
      ++it->second.imports;
    }
    for (const PickleCall& c : s.calls) {
      if (auto it = rows.find(c.target); it != rows.end()) ++it->second.calls;
    }
  }
  absl::StrAppend(&out, "imports (", order.size(), "):\n");
  for (const std::string& g : order) {
    const Row& r = rows[g];
    const PickleImport& i = *r.first;
    const std::string alias = PickleGlobalAlias(i.module, i.name);
    const std::string label =
        EscapeUntrusted(alias.empty() ? g : absl::StrCat(g, " (", alias, ")"));
    absl::StrAppend(&out, absl::StrFormat("  %-44s %-10s %d call(s)", label,
                                          i.allowed     ? "allowed"
                                          : i.dangerous ? "DANGEROUS"
                                                        : "FLAGGED",
                                          r.calls));
    if (!i.allowed) absl::StrAppend(&out, "  at byte ", i.offset, " (", i.opcode, ")");
    absl::StrAppend(&out, "\n");
  }
  for (const PickleStream& s : scan.streams) {
    if (!s.error.empty()) {
      absl::StrAppend(&out, "  ", EscapeUntrusted(s.name),
                      ": scan stopped: ", EscapeUntrusted(s.error), "\n");
    }
  }
  if (scan.safe()) {
    absl::StrAppend(&out, "verdict: every import is in the allow-list\n");
  } else {
    std::string list;
    for (size_t i = 0; i < scan.flagged.size(); ++i) {
      absl::StrAppend(&list, i ? ", " : "", EscapeUntrusted(scan.flagged[i]));
    }
    absl::StrAppend(&out, "verdict: ", scan.flagged.size(), " flagged: ", list, "\n");
  }
  return out;
}

}  // namespace modelfs::cli
