// Reading the shell sessions of README.md: the `$ command` lines of a
// section's code blocks, with the output printed under each, split into
// words the way a POSIX shell would for the simple commands the README uses.
#ifndef ASIDE_TESTS_INTEGRATION_README_SESSION_H_
#define ASIDE_TESTS_INTEGRATION_README_SESSION_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace aside::testing {

// One `$ ...` line (with its `\` continuations) and the lines after it up to
// the next `$` line or the end of the block.
struct SessionStep {
  int line = 0;  // 1-based line of the `$` in the markdown
  std::string command;
  std::vector<std::string> output;
};

// The steps of every fenced code block under the heading `heading` (the
// exact heading line, e.g. "## Quick start"), up to the next heading of the
// same or a higher level. Blocks without `$` lines give no steps.
std::vector<SessionStep> SessionSteps(const std::string& markdown,
                                      const std::string& heading);

// Splits `command` into words: single quotes keep everything, double quotes
// expand $NAME from `vars`, a backslash escapes the next character, an
// unquoted `#` after whitespace starts a comment, `|` (unquoted) is a word
// of its own. Fails on what it does not model ($(...), unterminated quotes).
absl::StatusOr<std::vector<std::string>> ShellWords(
    const std::string& command, const std::map<std::string, std::string>& vars);

}  // namespace aside::testing

#endif  // ASIDE_TESTS_INTEGRATION_README_SESSION_H_
