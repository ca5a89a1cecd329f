// Builds tables for policy tests: backends 10.0.0.1:1000, 10.0.0.2:1000, ...
// (index i is backend i: addresses sort in creation order).
#ifndef ASIDE_TESTS_TESTING_TABLES_H_
#define ASIDE_TESTS_TESTING_TABLES_H_

#include <cstdio>
#include <string>
#include <vector>

#include "lib/table.h"

namespace aside::testing {

// "10.0.<i/250>.<i%250+1>:1000" zero-padded so that lexical order is index
// order for up to 62500 backends.
inline std::string TestAddress(size_t i) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "10.%03zu.%03zu.%03zu:1000", i / 62500,
                (i / 250) % 250, i % 250 + 1);
  return buf;
}

struct TableOptions {
  std::vector<uint32_t> weights;
  std::vector<bool> ready;  // empty: all ready
  double panic_threshold = 0;
  std::string group = "test";
  uint64_t generation = 1;
  std::shared_ptr<const std::string> session_key;
};

inline TableSpec MakeTableSpec(const PolicyConfig& policy,
                               const TableOptions& options) {
  TableSpec spec;
  spec.group = options.group;
  spec.generation = options.generation;
  spec.policy = policy;
  spec.panic_threshold = options.panic_threshold;
  spec.session_key = options.session_key;
  for (size_t i = 0; i < options.weights.size(); ++i) {
    Member m;
    m.backend.address = TestAddress(i);
    m.backend.weight = options.weights[i];
    m.weight = options.weights[i];
    m.ready = options.ready.empty() || options.ready[i];
    spec.members.push_back(std::move(m));
  }
  return spec;
}

}  // namespace aside::testing

#endif  // ASIDE_TESTS_TESTING_TABLES_H_
