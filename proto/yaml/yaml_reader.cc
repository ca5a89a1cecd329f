#include "proto/yaml/yaml_reader.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/duration.h"

namespace aside::yaml {

namespace {

// Notes where documents start and how deeply collections nest, without
// building nodes; stops (by exception) at the first thing refused.
class ShapeCheck : public YAML::EventHandler {
 public:
  struct Refused {
    YAML::Mark mark;
    std::string message;
  };

  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++documents_ > 1) {
      throw Refused{mark,
                    "a second YAML document; the file must hold exactly one"};
    }
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { Count(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { Count(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string&) override {
    Count(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&,
                       YAML::anchor_t, YAML::EmitterStyle::value) override {
    Enter(mark);
  }
  void OnSequenceEnd() override { --depth_; }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    Enter(mark);
  }
  void OnMapEnd() override { --depth_; }

 private:
  void Count(const YAML::Mark& mark) {
    if (++nodes_ > kMaxYamlNodes) {
      throw Refused{mark, absl::StrCat("more than ", kMaxYamlNodes,
                                       " YAML nodes; a document this large "
                                       "belongs in the Admin API")};
    }
  }
  void Enter(const YAML::Mark& mark) {
    Count(mark);
    if (++depth_ > kMaxYamlDepth) {
      throw Refused{
          mark, absl::StrCat("nested deeper than ", kMaxYamlDepth, " levels")};
    }
  }

  int documents_ = 0;
  int depth_ = 0;
  size_t nodes_ = 0;
};

absl::Status At(absl::string_view file, const YAML::Mark& mark,
                absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(
      file, ":", mark.line + 1, ":", mark.column + 1, ": ", message));
}

}  // namespace

absl::StatusOr<YAML::Node> LoadYaml(absl::string_view text,
                                    absl::string_view file) {
  if (text.size() > kMaxYamlBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": ", text.size(), " bytes, more than the ",
                     kMaxYamlBytes, " a YAML file may hold"));
  }
  try {
    // First the shape (one document, bounded nesting), event by event, so
    // that nothing deep or ignored is ever built; then the document.
    {
      std::istringstream in{std::string(text)};
      YAML::Parser parser(in);
      ShapeCheck shape;
      while (parser.HandleNextDocument(shape)) {
      }
    }
    return YAML::Load(std::string(text));
  } catch (const ShapeCheck::Refused& r) {
    return At(file, r.mark, r.message);
  } catch (const YAML::Exception& e) {
    return At(file, e.mark, e.msg);
  }
}

std::string JoinPath(absl::string_view path, absl::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

std::string IndexPath(absl::string_view path, size_t index) {
  return absl::StrCat(path, "[", index, "]");
}

absl::Status YamlReader::Status() const {
  if (error_count_ == 0) {
    return absl::OkStatus();
  }
  std::string message = absl::StrJoin(errors_, "\n");
  if (error_count_ > errors_.size()) {
    absl::StrAppend(&message, "\n", file_, ": ... and ",
                    error_count_ - errors_.size(), " more errors (",
                    error_count_, " in all)");
  }
  return absl::InvalidArgumentError(message);
}

void YamlReader::Error(const YAML::Node& node, absl::string_view path,
                       absl::string_view message) {
  ErrorAt(node.Mark(), path, message);
}

void YamlReader::ErrorAt(const YAML::Mark& mark, absl::string_view path,
                         absl::string_view message) {
  if (++error_count_ > kMaxReportedYamlErrors) {
    return;
  }
  if (mark.is_null()) {
    errors_.push_back(absl::StrCat(file_, ": ", path, ": ", message));
    return;
  }
  errors_.push_back(absl::StrCat(file_, ":", mark.line + 1, ":",
                                 mark.column + 1, ": ", path, ": ", message));
}

bool YamlReader::CheckMap(const YAML::Node& node, absl::string_view path,
                          std::initializer_list<absl::string_view> allowed) {
  const std::vector<std::string> keys(allowed.begin(), allowed.end());
  return CheckMapKeys(node, path, keys);
}

bool YamlReader::CheckMapKeys(const YAML::Node& node, absl::string_view path,
                              absl::Span<const std::string> allowed) {
  if (!node.IsMap()) {
    Error(node, path, "expected a mapping");
    return false;
  }
  std::set<std::string> seen;
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) {
      Error(kv.first, path, "keys must be strings");
      continue;
    }
    const std::string& key = kv.first.Scalar();
    const std::string key_path = JoinPath(path, key);
    if (!seen.insert(key).second) {
      Error(kv.first, key_path, "key given twice");
      continue;
    }
    const bool known =
        std::find(allowed.begin(), allowed.end(), key) != allowed.end();
    if (!known) {
      Error(kv.first, key_path,
            absl::StrCat("unknown key (allowed: ", absl::StrJoin(allowed, ", "),
                         ")"));
    }
  }
  return true;
}

bool YamlReader::GetString(const YAML::Node& node, absl::string_view path,
                           std::string* out) {
  if (!node.IsScalar()) {
    Error(node, path, "expected a string");
    return false;
  }
  *out = node.Scalar();
  return true;
}

bool YamlReader::GetBool(const YAML::Node& node, absl::string_view path,
                         bool* out) {
  if (!node.IsScalar()) {
    Error(node, path, "expected true or false");
    return false;
  }
  const std::string& s = node.Scalar();
  if (s == "true" || s == "yes" || s == "on") {
    *out = true;
  } else if (s == "false" || s == "no" || s == "off") {
    *out = false;
  } else {
    Error(node, path, absl::StrCat("expected true or false, got '", s, "'"));
    return false;
  }
  return true;
}

bool YamlReader::GetUint64(const YAML::Node& node, absl::string_view path,
                           uint64_t* out) {
  if (!node.IsScalar()) {
    Error(node, path, "expected an integer");
    return false;
  }
  const std::string& s = node.Scalar();
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) {
    Error(node, path,
          absl::StrCat("expected a non-negative integer, got '", s, "'"));
    return false;
  }
  if (!absl::SimpleAtoi(s, out)) {
    Error(node, path, absl::StrCat(s, " does not fit in 64 bits"));
    return false;
  }
  return true;
}

bool YamlReader::GetUint32(const YAML::Node& node, absl::string_view path,
                           uint32_t* out) {
  uint64_t v = 0;
  if (!GetUint64(node, path, &v)) {
    return false;
  }
  if (v > std::numeric_limits<uint32_t>::max()) {
    Error(node, path, absl::StrCat(v, " does not fit in 32 bits"));
    return false;
  }
  *out = static_cast<uint32_t>(v);
  return true;
}

bool YamlReader::GetDouble(const YAML::Node& node, absl::string_view path,
                           double* out) {
  if (!node.IsScalar()) {
    Error(node, path, "expected a number");
    return false;
  }
  double v = 0;
  if (!absl::SimpleAtod(node.Scalar(), &v) || !std::isfinite(v)) {
    Error(node, path,
          absl::StrCat("expected a number, got '", node.Scalar(), "'"));
    return false;
  }
  *out = v;
  return true;
}

bool YamlReader::GetDuration(const YAML::Node& node, absl::string_view path,
                             absl::Duration* out) {
  if (!node.IsScalar()) {
    Error(node, path, "expected a duration like 500ms, 5s or 1m");
    return false;
  }
  absl::StatusOr<absl::Duration> d = ParseDurationText(node.Scalar());
  if (!d.ok()) {
    Error(node, path, d.status().message());
    return false;
  }
  *out = *d;
  return true;
}

}  // namespace aside::yaml
