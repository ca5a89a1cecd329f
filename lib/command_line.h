// Command lines of the Aside binaries, parsed against their absl flags.
//
// Each binary declares its flags with ABSL_FLAG (typed values, defaults,
// help text, parsing of numbers, durations and lists all come from abseil)
// and calls ParseCommandLine, which adds what the binaries' documented
// command lines need and absl::ParseCommandLine (abseil 20220623) lacks:
//
//  - hyphenated names: `--state-dir` sets the flag declared as `state_dir`
//    (both spellings are accepted);
//  - errors returned, not printed with exit(1): each binary prints them its
//    own way and exits with its usage-error code; they name the flag as the
//    user typed it (`unknown flag '--listne'`);
//  - a list flag (std::vector<std::string>) may be repeated, and its values
//    accumulate: `--backend a --backend b` equals `--backend a,b`;
//  - `--help`/`-h` prints the binary's own usage text and exits 0, and
//    `--version` prints the version line and exits 0.
//
// Syntax: `--name=value` or `--name value`; a bool flag alone (`--json`)
// is true. Arguments that do not start with `--` are positional, and so is
// everything after a bare `--`.
//
// Called once, from main, before any other thread starts.
#ifndef ASIDE_LIB_COMMAND_LINE_H_
#define ASIDE_LIB_COMMAND_LINE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace aside {

struct CommandLineOptions {
  // Printed for --help and -h.
  absl::string_view usage;
  // Printed for --version when not empty ("aside-server 0.1.0").
  absl::string_view version;
  // Whether positional arguments are allowed (an error otherwise).
  bool positional = false;
  // Flags starting with one of these prefixes are ignored (for example
  // Google Benchmark's, which a runner passes to every tool).
  std::vector<absl::string_view> ignored_prefixes;
};

// Sets the flags named on the command line; returns the positional
// arguments (without argv[0]). An InvalidArgument error names the flag.
absl::StatusOr<std::vector<std::string>> ParseCommandLine(
    int argc, char** argv, const CommandLineOptions& options);

}  // namespace aside

#endif  // ASIDE_LIB_COMMAND_LINE_H_
