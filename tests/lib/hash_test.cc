#include "lib/hash.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <set>
#include <string>

#include "lib/random.h"

namespace aside {
namespace {

TEST(FastModuloTest, EqualsTheRemainderForEveryKindOfDivisor) {
  FastRng rng(17);
  std::vector<uint64_t> divisors = {1,
                                    2,
                                    3,
                                    4,
                                    5,
                                    7,
                                    10,
                                    400,
                                    65537,
                                    1000003,
                                    (uint64_t{1} << 32) - 1,
                                    uint64_t{1} << 32,
                                    (uint64_t{1} << 63) + 1,
                                    ~uint64_t{0}};
  for (int i = 0; i < 200; ++i) {
    divisors.push_back(1 + rng.Below(1u << (i % 32)));
    divisors.push_back(rng.Next() | 1);
  }
  for (uint64_t d : divisors) {
    const FastModulo m(d);
    for (uint64_t a : {uint64_t{0}, uint64_t{1}, d - 1, d, d + 1, 2 * d - 1,
                       ~uint64_t{0}, ~uint64_t{0} - 1}) {
      ASSERT_EQ(m.Mod(a), a % d) << a << " % " << d;
    }
    for (int j = 0; j < 2000; ++j) {
      const uint64_t a = rng.Next();
      ASSERT_EQ(m.Mod(a), a % d) << a << " % " << d;
      ASSERT_EQ(m.Quotient(a), a / d) << a << " / " << d;
    }
  }
}

TEST(Crc32ShortTest, EqualsZlibForEveryLength) {
  FastRng rng(5);
  std::string data;
  for (int len = 0; len < 200; ++len) {
    ASSERT_EQ(Crc32Short(data),
              static_cast<uint32_t>(
                  crc32(0, reinterpret_cast<const Bytef*>(data.data()),
                        static_cast<uInt>(data.size()))))
        << len;
    ASSERT_EQ(Crc32Short(data), Crc32(data));
    data.push_back(static_cast<char>(rng.Next()));
  }
}

TEST(Hash64Test, IsAFixedFunctionOfItsInput) {
  // Golden values: ring and table layouts depend on them, in every process.
  EXPECT_EQ(Hash64("", 0), Hash64("", 0));
  EXPECT_NE(Hash64("a", 0), Hash64("a", 1));
  EXPECT_NE(Hash64("10.0.0.1:80", 0), Hash64("10.0.0.2:80", 0));
  std::set<uint64_t> seen;
  for (int len = 0; len < 40; ++len) {
    seen.insert(Hash64(std::string(len, 'x'), 7));
  }
  EXPECT_EQ(seen.size(), 40u);  // the length is mixed in
}

}  // namespace
}  // namespace aside
