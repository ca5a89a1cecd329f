// Builds tables for policy tests: backends 10.100.100.100:1000,
// 10.100.100.101:1000, ... (index i is backend i: every octet has three
// digits, so addresses sort in creation order).
#ifndef ASIDE_TESTS_TESTING_TABLES_H_
#define ASIDE_TESTS_TESTING_TABLES_H_

#include <cstdio>
#include <string>
#include <vector>

#include "lib/table.h"

namespace aside::testing {

// "10.1ab.1cd.1ef:1000" for i = abcdef: canonical IPv4 whose lexical order
// is index order, for up to a million backends.
inline std::string TestAddress(size_t i) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "10.%zu.%zu.%zu:1000", 100 + i / 10000,
                100 + (i / 100) % 100, 100 + i % 100);
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
