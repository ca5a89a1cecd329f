#include "lib/hash.h"

#include <zlib.h>

namespace aside {
namespace {

inline uint64_t Load64(const char* p) noexcept {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

constexpr uint64_t kP0 = 0xa0761d6478bd642fULL;
constexpr uint64_t kP1 = 0xe7037ed1a0b428dbULL;
constexpr uint64_t kP2 = 0x8ebc6af09c88c6e3ULL;
constexpr uint64_t kP3 = 0x589965cc75374cc3ULL;

}  // namespace

uint64_t Hash64(absl::string_view data, uint64_t seed) noexcept {
  const char* p = data.data();
  size_t len = data.size();
  uint64_t h = seed ^ Mum64(seed ^ kP0, kP1) ^ len;
  while (len >= 16) {
    h = Mum64(Load64(p) ^ kP1, Load64(p + 8) ^ h);
    p += 16;
    len -= 16;
  }
  uint64_t a = 0;
  uint64_t b = 0;
  if (len >= 8) {
    a = Load64(p);
    b = Load64(p + len - 8);  // overlaps `a` when len < 16
  } else if (len > 0) {
    // Up to 7 bytes, packed little-endian.
    for (size_t i = 0; i < len; ++i) {
      a |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
    }
    b = static_cast<uint64_t>(len) << 56;
  }
  h = Mum64(a ^ kP1, b ^ h);
  return Mum64(h ^ kP2, static_cast<uint64_t>(data.size()) ^ kP3);
}

uint32_t Crc32(absl::string_view data) noexcept { return Crc32Update(0, data); }

uint32_t Crc32Update(uint32_t crc, absl::string_view data) noexcept {
  // zlib's crc32() takes a uInt length; feed it in chunks.
  uLong c = crc;
  const auto* p = reinterpret_cast<const Bytef*>(data.data());
  size_t len = data.size();
  while (len > 0) {
    const uInt chunk = len > (1u << 30) ? (1u << 30) : static_cast<uInt>(len);
    c = crc32(c, p, chunk);
    p += chunk;
    len -= chunk;
  }
  return static_cast<uint32_t>(c);
}

namespace {

constexpr uint64_t kXxPrime1 = 0x9e3779b185ebca87ULL;
constexpr uint64_t kXxPrime2 = 0xc2b2ae3d27d4eb4fULL;
constexpr uint64_t kXxPrime3 = 0x165667b19e3779f9ULL;
constexpr uint64_t kXxPrime4 = 0x85ebca77c2b2ae63ULL;
constexpr uint64_t kXxPrime5 = 0x27d4eb2f165667c5ULL;

inline uint64_t Rotl64(uint64_t x, int r) noexcept {
  return (x << r) | (x >> (64 - r));
}

inline uint64_t XxRound(uint64_t acc, uint64_t input) noexcept {
  acc += input * kXxPrime2;
  acc = Rotl64(acc, 31);
  return acc * kXxPrime1;
}

inline uint64_t XxMerge(uint64_t acc, uint64_t lane) noexcept {
  acc ^= XxRound(0, lane);
  return acc * kXxPrime1 + kXxPrime4;
}

inline uint32_t Load32(const char* p) noexcept {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

}  // namespace

uint64_t XxHash64(absl::string_view data, uint64_t seed) noexcept {
  const char* p = data.data();
  const size_t len = data.size();
  const char* const end = p + len;
  uint64_t h;
  if (len >= 32) {
    uint64_t v1 = seed + kXxPrime1 + kXxPrime2;
    uint64_t v2 = seed + kXxPrime2;
    uint64_t v3 = seed;
    uint64_t v4 = seed - kXxPrime1;
    const char* const limit = end - 32;
    do {
      v1 = XxRound(v1, Load64(p));
      v2 = XxRound(v2, Load64(p + 8));
      v3 = XxRound(v3, Load64(p + 16));
      v4 = XxRound(v4, Load64(p + 24));
      p += 32;
    } while (p <= limit);
    h = Rotl64(v1, 1) + Rotl64(v2, 7) + Rotl64(v3, 12) + Rotl64(v4, 18);
    h = XxMerge(h, v1);
    h = XxMerge(h, v2);
    h = XxMerge(h, v3);
    h = XxMerge(h, v4);
  } else {
    h = seed + kXxPrime5;
  }
  h += static_cast<uint64_t>(len);
  for (; p + 8 <= end; p += 8) {
    h ^= XxRound(0, Load64(p));
    h = Rotl64(h, 27) * kXxPrime1 + kXxPrime4;
  }
  if (p + 4 <= end) {
    h ^= static_cast<uint64_t>(Load32(p)) * kXxPrime1;
    h = Rotl64(h, 23) * kXxPrime2 + kXxPrime3;
    p += 4;
  }
  for (; p < end; ++p) {
    h ^= static_cast<uint64_t>(static_cast<unsigned char>(*p)) * kXxPrime5;
    h = Rotl64(h, 11) * kXxPrime1;
  }
  h ^= h >> 33;
  h *= kXxPrime2;
  h ^= h >> 29;
  h *= kXxPrime3;
  h ^= h >> 32;
  return h;
}

}  // namespace aside
