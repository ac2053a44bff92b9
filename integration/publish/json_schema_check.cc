#include "integration/publish/json_schema_check.h"

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"

#ifndef MODELFS_SCHEMA_DIR
#error "MODELFS_SCHEMA_DIR must name integration/schemas"
#endif

namespace modelfs::testing {
namespace {

using nlohmann::json;

const std::set<std::string>& AnnotationKeywords() {
  static const std::set<std::string> k = {"$schema", "$id",      "title",    "description",
                                          "format",  "$comment", "examples", "$defs"};
  return k;
}

bool HasType(const json& v, const std::string& t) {
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "integer") return v.is_number_integer();
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  return false;
}

class Checker {
 public:
  explicit Checker(const json& root) : root_(root) {}

  void Check(const json& schema, const json& v, const std::string& path) {
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) Fail(path, "no value is allowed here");
      return;
    }
    if (!schema.is_object()) {
      Fail(path, "schema is neither an object nor a boolean");
      return;
    }
    for (const auto& [key, sub] : schema.items()) {
      if (AnnotationKeywords().count(key)) continue;
      if (key == "$ref") {
        const json* target = Resolve(sub.get<std::string>());
        if (target == nullptr) {
          Fail(path, absl::StrCat("unresolvable $ref ", sub.get<std::string>()));
        } else {
          Check(*target, v, path);
        }
      } else if (key == "type") {
        bool ok = false;
        if (sub.is_string()) {
          ok = HasType(v, sub.get<std::string>());
        } else {
          for (const auto& t : sub) ok = ok || HasType(v, t.get<std::string>());
        }
        if (!ok) Fail(path, absl::StrCat("is ", v.type_name(), ", want type ", sub.dump()));
      } else if (key == "required") {
        if (!v.is_object()) continue;
        for (const auto& name : sub) {
          if (!v.contains(name.get<std::string>())) {
            Fail(path,
                 absl::StrCat("required property '", name.get<std::string>(), "' is missing"));
          }
        }
      } else if (key == "properties") {
        if (!v.is_object()) continue;
        for (const auto& [name, prop_schema] : sub.items()) {
          if (v.contains(name)) Check(prop_schema, v.at(name), absl::StrCat(path, ".", name));
        }
      } else if (key == "patternProperties") {
        if (!v.is_object()) continue;
        for (const auto& [pattern, prop_schema] : sub.items()) {
          std::regex re(pattern, std::regex::ECMAScript);
          for (const auto& [name, value] : v.items()) {
            if (std::regex_search(name, re))
              Check(prop_schema, value, absl::StrCat(path, ".", name));
          }
        }
      } else if (key == "additionalProperties") {
        if (!v.is_object()) continue;
        for (const auto& [name, value] : v.items()) {
          if (Declared(schema, name)) continue;
          if (sub.is_boolean() && !sub.get<bool>()) {
            Fail(path, absl::StrCat("property '", name, "' is not allowed"));
          } else if (sub.is_object()) {
            Check(sub, value, absl::StrCat(path, ".", name));
          }
        }
      } else if (key == "items") {
        if (!v.is_array()) continue;
        for (size_t i = 0; i < v.size(); ++i) Check(sub, v[i], absl::StrCat(path, "[", i, "]"));
      } else if (key == "minItems") {
        if (v.is_array() && v.size() < sub.get<size_t>()) {
          Fail(path, absl::StrCat("has ", v.size(), " items, want at least ", sub.dump()));
        }
      } else if (key == "maxItems") {
        if (v.is_array() && v.size() > sub.get<size_t>()) {
          Fail(path, absl::StrCat("has ", v.size(), " items, want at most ", sub.dump()));
        }
      } else if (key == "enum") {
        bool found = false;
        for (const auto& e : sub) found = found || e == v;
        if (!found) Fail(path, absl::StrCat(v.dump(), " is not one of ", sub.dump()));
      } else if (key == "const") {
        if (sub != v) Fail(path, absl::StrCat(v.dump(), " is not ", sub.dump()));
      } else if (key == "minLength") {
        if (v.is_string() && v.get<std::string>().size() < sub.get<size_t>()) {
          Fail(path, absl::StrCat("is shorter than ", sub.dump(), " characters"));
        }
      } else if (key == "pattern") {
        if (!v.is_string()) continue;
        std::regex re(sub.get<std::string>(), std::regex::ECMAScript);
        if (!std::regex_search(v.get<std::string>(), re)) {
          Fail(path, absl::StrCat(v.dump(), " does not match ", sub.get<std::string>()));
        }
      } else if (key == "maximum") {
        if (v.is_number() && v.get<double>() > sub.get<double>()) {
          Fail(path, absl::StrCat(v.dump(), " is more than ", sub.dump()));
        }
      } else if (key == "minimum") {
        if (v.is_number() && v.get<double>() < sub.get<double>()) {
          Fail(path, absl::StrCat(v.dump(), " is less than ", sub.dump()));
        }
      } else {
        Fail(path, absl::StrCat("schema keyword '", key, "' is not supported by this checker"));
      }
    }
  }

  std::vector<std::string> TakeErrors() { return std::move(errors_); }

 private:
  static bool Declared(const json& schema, const std::string& name) {
    if (schema.contains("properties") && schema["properties"].contains(name)) return true;
    if (schema.contains("patternProperties")) {
      for (const auto& [pattern, unused] : schema["patternProperties"].items()) {
        if (std::regex_search(name, std::regex(pattern, std::regex::ECMAScript))) return true;
      }
    }
    return false;
  }

  const json* Resolve(const std::string& ref) const {
    // Only local JSON pointers: "#/$defs/Name" or "#/definitions/Name".
    if (ref.rfind("#/", 0) != 0) return nullptr;
    const json* cur = &root_;
    size_t pos = 2;
    while (pos <= ref.size()) {
      size_t next = ref.find('/', pos);
      std::string token =
          ref.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
      if (!cur->is_object() || !cur->contains(token)) return nullptr;
      cur = &(*cur)[token];
      if (next == std::string::npos) break;
      pos = next + 1;
    }
    return cur;
  }

  void Fail(const std::string& path, const std::string& why) {
    errors_.push_back(absl::StrCat(path, ": ", why));
  }

  const json& root_;
  std::vector<std::string> errors_;
};

}  // namespace

std::vector<std::string> CheckJsonSchema(const nlohmann::json& schema, const nlohmann::json& doc) {
  Checker c(schema);
  c.Check(schema, doc, "$");
  return c.TakeErrors();
}

absl::StatusOr<nlohmann::json> LoadJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json doc = nlohmann::json::parse(ss.str(), nullptr, false);
  if (doc.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not JSON"));
  return doc;
}

std::string SchemaDir() { return MODELFS_SCHEMA_DIR; }

}  // namespace modelfs::testing
