// Reading YAML with positions: every error names file:line:column and the
// key path ("aside.yaml:12:15: groups[0].backends[1].weight: ..."), and all
// errors of a document are collected rather than stopping at the first.
//
// The getters check types and syntax only (is it a mapping, a string, an
// integer that fits the field, a bool, a duration); ranges belong to the
// validators of whatever is read. Used by the config file's reader (server/)
// and the group shorthand converter (proto/yaml/group_yaml.h), which asidectl
// shares.
#ifndef ASIDE_PROTO_YAML_YAML_READER_H_
#define ASIDE_PROTO_YAML_YAML_READER_H_

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace aside::yaml {

// Bounds on what LoadYaml takes: the text's size, how deeply mappings and
// sequences nest (config files nest about six levels), and how many nodes
// (scalars, nulls, aliases, mappings, sequences) the document holds. Built
// nodes cost yaml-cpp a few hundred bytes each: the node bound keeps a
// document's tree to tens of megabytes, where 16 MiB of short lines would
// otherwise make millions of them. 200 000 nodes is a file of about 20 000
// backends with addresses and weights; fleets larger than that belong in
// the Admin API and the store.
inline constexpr size_t kMaxYamlBytes = size_t{16} << 20;
inline constexpr int kMaxYamlDepth = 64;
inline constexpr size_t kMaxYamlNodes = 200'000;

// Parses a YAML (or JSON) document. Syntax errors are InvalidArgument
// "file:line:column: message". yaml-cpp reports by exception; this is the
// boundary that catches it. Also refused, with the position: a second
// document (`---`), which would otherwise be ignored; nesting deeper than
// kMaxYamlDepth; more than kMaxYamlNodes nodes (found by a streaming pass
// that builds none, so the refusal costs little); and text longer than
// kMaxYamlBytes.
absl::StatusOr<YAML::Node> LoadYaml(absl::string_view text,
                                    absl::string_view file);

// "path.key", or "key" at the top.
std::string JoinPath(absl::string_view path, absl::string_view key);
// "path[index]".
std::string IndexPath(absl::string_view path, size_t index);

// At most this many errors are kept and reported; the rest are counted.
inline constexpr size_t kMaxReportedYamlErrors = 100;

// Collects positioned errors while a document is walked. Not thread-safe.
class YamlReader {
 public:
  explicit YamlReader(std::string file) : file_(std::move(file)) {}

  const std::string& file() const { return file_; }
  // The first kMaxReportedYamlErrors errors.
  const std::vector<std::string>& errors() const { return errors_; }
  // How many errors were reported, kept or not.
  size_t error_count() const { return error_count_; }
  // The kept errors, one per line, then "... and N more errors" when some
  // were only counted (a file of 10 000 bad groups gives a readable
  // message, not megabytes of them); OK when there are none.
  absl::Status Status() const;

  // "file:line:column: path: message".
  void Error(const YAML::Node& node, absl::string_view path,
             absl::string_view message);
  void ErrorAt(const YAML::Mark& mark, absl::string_view path,
               absl::string_view message);

  // Checks that `node` is a mapping whose keys are strings from `allowed`,
  // none given twice. Returns false (after reporting) when it is not a
  // mapping; unknown and repeated keys are reported and the rest read.
  bool CheckMap(const YAML::Node& node, absl::string_view path,
                std::initializer_list<absl::string_view> allowed);
  // The same, with the allowed keys in a list made at run time.
  bool CheckMapKeys(const YAML::Node& node, absl::string_view path,
                    absl::Span<const std::string> allowed);

  // Each getter reports and returns false when `node` has the wrong type.
  bool GetString(const YAML::Node& node, absl::string_view path,
                 std::string* out);
  bool GetBool(const YAML::Node& node, absl::string_view path, bool* out);
  // A non-negative integer that fits the type.
  bool GetUint64(const YAML::Node& node, absl::string_view path, uint64_t* out);
  bool GetUint32(const YAML::Node& node, absl::string_view path, uint32_t* out);
  // A finite number.
  bool GetDouble(const YAML::Node& node, absl::string_view path, double* out);
  // A duration like 500ms, 5s, 1m (lib/duration.h).
  bool GetDuration(const YAML::Node& node, absl::string_view path,
                   absl::Duration* out);

 private:
  std::string file_;
  std::vector<std::string> errors_;
  size_t error_count_ = 0;
};

}  // namespace aside::yaml

#endif  // ASIDE_PROTO_YAML_YAML_READER_H_
