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

}  // namespace aside
