#include "tests/integration/readme_session.h"

#include <cctype>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace aside::testing {
namespace {

// "## Title" -> 2; not a heading -> 0.
int HeadingLevel(absl::string_view line) {
  size_t n = 0;
  while (n < line.size() && line[n] == '#') {
    ++n;
  }
  return n > 0 && n < line.size() && line[n] == ' ' ? static_cast<int>(n) : 0;
}

// Whether `command` ends inside a quoted string (the shell reads on).
bool InsideQuotes(absl::string_view command) {
  char quote = 0;
  for (size_t i = 0; i < command.size(); ++i) {
    const char c = command[i];
    if (quote == 0 && c == '\\') {
      ++i;
    } else if (quote == 0 && (c == '\'' || c == '"')) {
      quote = c;
    } else if (quote == '"' && c == '\\') {
      ++i;
    } else if (c == quote) {
      quote = 0;
    }
  }
  return quote != 0;
}

}  // namespace

std::vector<SessionStep> SessionSteps(const std::string& markdown,
                                      const std::string& heading) {
  std::vector<SessionStep> steps;
  const std::vector<std::string> lines = absl::StrSplit(markdown, '\n');
  int level = 0;  // of `heading` once found
  bool in_block = false;
  bool continued = false;
  bool open = false;  // a step of the current block takes output lines
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (absl::StartsWith(line, "```")) {
      in_block = !in_block;
      continued = false;
      open = false;
      continue;
    }
    if (!in_block) {
      if (const int l = HeadingLevel(line); l > 0) {
        if (level > 0 && l <= level) {
          break;
        }
        if (line == heading) {
          level = l;
        }
      }
      continue;
    }
    if (level == 0) {
      continue;
    }
    absl::string_view text = line;
    if (continued && InsideQuotes(steps.back().command)) {
      // A quoted string spanning lines keeps its line breaks.
      absl::StrAppend(&steps.back().command, "\n", line);
      continued = InsideQuotes(steps.back().command);
      if (!continued) {
        // The rest of the line may end in a `\` continuation.
        std::string& c = steps.back().command;
        absl::string_view rest = absl::StripTrailingAsciiWhitespace(c);
        continued = absl::EndsWith(rest, "\\");
        c.resize(rest.size() - (continued ? 1 : 0));
        c = std::string(absl::StripTrailingAsciiWhitespace(c));
      }
      continue;
    }
    if (continued) {
      steps.back().command += " ";
    } else if (absl::ConsumePrefix(&text, "$ ")) {
      steps.push_back(SessionStep{.line = static_cast<int>(i + 1)});
      open = true;
    } else {
      if (open && !line.empty()) {
        steps.back().output.push_back(line);
      }
      continue;
    }
    text = absl::StripAsciiWhitespace(text);
    continued = absl::ConsumeSuffix(&text, "\\");
    absl::StrAppend(&steps.back().command, absl::StripAsciiWhitespace(text));
    continued = continued || InsideQuotes(steps.back().command);
  }
  return steps;
}

absl::StatusOr<std::vector<std::string>> ShellWords(
    const std::string& command,
    const std::map<std::string, std::string>& vars) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  auto expand = [&](size_t* i) -> absl::StatusOr<std::string> {
    // command[*i] is '$'.
    size_t end = *i + 1;
    if (end < command.size() && command[end] == '(') {
      return absl::InvalidArgumentError(
          absl::StrCat("command substitution is not modelled: ", command));
    }
    while (end < command.size() &&
           (std::isalnum(static_cast<unsigned char>(command[end])) ||
            command[end] == '_')) {
      ++end;
    }
    const std::string name = command.substr(*i + 1, end - *i - 1);
    auto it = vars.find(name);
    if (name.empty() || it == vars.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown variable $", name, " in: ", command));
    }
    *i = end - 1;
    return it->second;
  };
  for (size_t i = 0; i < command.size(); ++i) {
    const char c = command[i];
    if (c == ' ' || c == '\t') {
      if (in_word) {
        words.push_back(std::move(word));
        word.clear();
        in_word = false;
      }
    } else if (c == '#' && !in_word) {
      break;
    } else if (c == '|' && !in_word) {
      words.emplace_back("|");
    } else if (c == '\'') {
      const size_t end = command.find('\'', i + 1);
      if (end == std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("unterminated ' in: ", command));
      }
      word += command.substr(i + 1, end - i - 1);
      in_word = true;
      i = end;
    } else if (c == '"') {
      in_word = true;
      for (++i;; ++i) {
        if (i >= command.size()) {
          return absl::InvalidArgumentError(
              absl::StrCat("unterminated \" in: ", command));
        }
        if (command[i] == '"') {
          break;
        }
        if (command[i] == '$') {
          absl::StatusOr<std::string> value = expand(&i);
          if (!value.ok()) {
            return value.status();
          }
          word += *value;
        } else if (command[i] == '\\' && i + 1 < command.size()) {
          word += command[++i];
        } else {
          word += command[i];
        }
      }
    } else if (c == '$') {
      absl::StatusOr<std::string> value = expand(&i);
      if (!value.ok()) {
        return value.status();
      }
      word += *value;
      in_word = true;
    } else if (c == '\\' && i + 1 < command.size()) {
      word += command[++i];
      in_word = true;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) {
    words.push_back(std::move(word));
  }
  return words;
}

}  // namespace aside::testing
