#include "lib/command_line.h"

#include <cstdlib>
#include <iostream>
#include <map>
#include <utility>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace aside {
namespace {

// One flag as written, with its value(s) in command-line order.
struct Setting {
  std::string typed;  // "--state-dir", for messages
  absl::CommandLineFlag* flag;
  std::vector<std::string> values;
};

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseCommandLine(
    int argc, char** argv, const CommandLineOptions& options) {
  std::vector<std::string> positional;
  std::vector<Setting> settings;
  std::map<absl::CommandLineFlag*, size_t> list_index;
  bool flags_ended = false;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (!flags_ended && (arg == "--help" || arg == "-h")) {
      std::cout << options.usage;
      std::exit(0);
    }
    if (!flags_ended && arg == "--version" && !options.version.empty()) {
      std::cout << options.version << "\n";
      std::exit(0);
    }
    if (flags_ended || !absl::StartsWith(arg, "--")) {
      if (!options.positional) {
        return absl::InvalidArgumentError(
            absl::StrCat("unexpected argument '", arg, "' (see --help)"));
      }
      positional.emplace_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_ended = true;
      continue;
    }
    const size_t eq = arg.find('=');
    const absl::string_view typed = arg.substr(0, eq);
    bool ignored = false;
    for (absl::string_view prefix : options.ignored_prefixes) {
      ignored = ignored || absl::StartsWith(typed, prefix);
    }
    if (ignored) {
      continue;
    }
    const std::string name = absl::StrReplaceAll(typed.substr(2), {{"-", "_"}});
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr || flag->IsRetired()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag '", typed, "' (see --help)"));
    }
    std::string value;
    if (eq != absl::string_view::npos) {
      value = std::string(arg.substr(eq + 1));
    } else if (flag->IsOfType<bool>()) {
      value = "true";
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("flag '", typed, "' needs a value"));
    }
    // A repeated list flag accumulates into its first setting.
    if (flag->IsOfType<std::vector<std::string>>()) {
      auto [it, inserted] = list_index.try_emplace(flag, settings.size());
      if (!inserted) {
        settings[it->second].values.push_back(std::move(value));
        continue;
      }
    }
    settings.push_back({std::string(typed), flag, {std::move(value)}});
  }
  for (Setting& s : settings) {
    const std::string value = absl::StrJoin(s.values, ",");
    std::string error;
    if (!s.flag->ParseFrom(value, &error)) {
      // abseil's message names the flag by its declared name; keep only
      // its explanation, if any, after the value.
      const size_t detail = error.find("; ");
      return absl::InvalidArgumentError(absl::StrCat(
          "invalid value '", value, "' for flag '", s.typed, "'",
          detail == std::string::npos ? "" : error.substr(detail)));
    }
  }
  return positional;
}

}  // namespace aside
