// The low-level SHA-256 API lets the HMAC pad states be precomputed once and
// copied per pick without allocating (EVP contexts allocate on copy); it is
// deprecated in OpenSSL 3 but present and supported.
#define OPENSSL_API_COMPAT 10101
#include "lib/policies/sticky.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "lib/hash.h"
#include "lib/policies/pick_util.h"
#include "lib/selector_factory.h"
#include "lib/table.h"

namespace aside {
namespace {

constexpr unsigned char kVersion = 1;
constexpr size_t kPayloadBytes = 17;
constexpr absl::string_view kDomain = "aside-sticky-v1\n";
constexpr char kBase64Url[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static_assert(kStickyTokenChars <= SessionToken::kCapacity);
static_assert(kStickyTokenBytes == kPayloadBytes + SHA256_DIGEST_LENGTH);

constexpr std::array<int8_t, 256> MakeDecodeTable() {
  std::array<int8_t, 256> t{};
  for (size_t i = 0; i < 256; ++i) {
    t[i] = -1;
  }
  for (int i = 0; i < 64; ++i) {
    t[static_cast<unsigned char>(kBase64Url[i])] = static_cast<int8_t>(i);
  }
  return t;
}

void Put64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    p[i] = static_cast<unsigned char>(v >> (8 * i));
  }
}

uint64_t Get64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) {
    v |= static_cast<uint64_t>(p[i]) << (8 * i);
  }
  return v;
}

// base64url without padding; `out` holds 4 * ceil(n / 3) - padding chars.
size_t Encode(const unsigned char* in, size_t n, char* out) {
  size_t o = 0;
  size_t i = 0;
  for (; i + 3 <= n; i += 3) {
    const uint32_t v =
        (uint32_t{in[i]} << 16) | (uint32_t{in[i + 1]} << 8) | in[i + 2];
    out[o++] = kBase64Url[(v >> 18) & 63];
    out[o++] = kBase64Url[(v >> 12) & 63];
    out[o++] = kBase64Url[(v >> 6) & 63];
    out[o++] = kBase64Url[v & 63];
  }
  if (n - i == 1) {
    const uint32_t v = uint32_t{in[i]} << 16;
    out[o++] = kBase64Url[(v >> 18) & 63];
    out[o++] = kBase64Url[(v >> 12) & 63];
  } else if (n - i == 2) {
    const uint32_t v = (uint32_t{in[i]} << 16) | (uint32_t{in[i + 1]} << 8);
    out[o++] = kBase64Url[(v >> 18) & 63];
    out[o++] = kBase64Url[(v >> 12) & 63];
    out[o++] = kBase64Url[(v >> 6) & 63];
  }
  return o;
}

// Decodes exactly kStickyTokenBytes from kStickyTokenChars characters.
bool Decode(absl::string_view text, unsigned char* out) {
  static constexpr std::array<int8_t, 256> kDecode = MakeDecodeTable();
  if (text.size() != kStickyTokenChars) {
    return false;
  }
  uint32_t acc = 0;
  int bits = 0;
  size_t o = 0;
  for (char ch : text) {
    const int8_t d = kDecode[static_cast<unsigned char>(ch)];
    if (d < 0) {
      return false;
    }
    acc = (acc << 6) | static_cast<uint32_t>(d);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = static_cast<unsigned char>(acc >> bits);
      acc &= (1u << bits) - 1;
    }
  }
  // 66 chars carry 396 bits = 49 bytes + 4 bits, which must be zero (one
  // canonical spelling per token).
  return o == kStickyTokenBytes && acc == 0;
}

}  // namespace

struct StickyTokenCodec::Pads {
  SHA256_CTX inner;  // after (key ^ ipad) and the domain and group
  SHA256_CTX outer;  // after (key ^ opad)
};

uint64_t StickyBackendId(absl::string_view address) {
  return Hash64(address, kStickyIdSeed);
}

StickyTokenCodec::StickyTokenCodec(absl::string_view key,
                                   absl::string_view group)
    : pads_(std::make_unique<Pads>()) {
  std::array<unsigned char, SHA256_CBLOCK> block{};
  if (key.size() > SHA256_CBLOCK) {
    SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(),
           block.data());
  } else {
    std::memcpy(block.data(), key.data(), key.size());
  }
  std::array<unsigned char, SHA256_CBLOCK> pad;
  for (size_t i = 0; i < pad.size(); ++i) {
    pad[i] = block[i] ^ 0x36;
  }
  SHA256_Init(&pads_->inner);
  SHA256_Update(&pads_->inner, pad.data(), pad.size());
  SHA256_Update(&pads_->inner, kDomain.data(), kDomain.size());
  SHA256_Update(&pads_->inner, group.data(), group.size());
  SHA256_Update(&pads_->inner, "\n", 1);
  for (size_t i = 0; i < pad.size(); ++i) {
    pad[i] = block[i] ^ 0x5c;
  }
  SHA256_Init(&pads_->outer);
  SHA256_Update(&pads_->outer, pad.data(), pad.size());
  OPENSSL_cleanse(block.data(), block.size());
  OPENSSL_cleanse(pad.data(), pad.size());
}

StickyTokenCodec::~StickyTokenCodec() {
  OPENSSL_cleanse(pads_.get(), sizeof(Pads));
}

void StickyTokenCodec::Mac(const unsigned char* payload,
                           unsigned char* mac) const noexcept {
  SHA256_CTX ctx = pads_->inner;
  unsigned char inner[SHA256_DIGEST_LENGTH];
  SHA256_Update(&ctx, payload, kPayloadBytes);
  SHA256_Final(inner, &ctx);
  ctx = pads_->outer;
  SHA256_Update(&ctx, inner, sizeof(inner));
  SHA256_Final(mac, &ctx);
}

void StickyTokenCodec::Issue(uint64_t backend_id, int64_t expiry_unix_seconds,
                             SessionToken& out) const noexcept {
  unsigned char raw[kStickyTokenBytes];
  raw[0] = kVersion;
  Put64(raw + 1, static_cast<uint64_t>(expiry_unix_seconds));
  Put64(raw + 9, backend_id);
  Mac(raw, raw + kPayloadBytes);
  out.size = Encode(raw, sizeof(raw), out.data.data());
}

bool StickyTokenCodec::Open(absl::string_view token, uint64_t* backend_id,
                            int64_t* expiry_unix_seconds) const noexcept {
  unsigned char raw[kStickyTokenBytes];
  if (!Decode(token, raw) || raw[0] != kVersion) {
    return false;
  }
  unsigned char mac[SHA256_DIGEST_LENGTH];
  Mac(raw, mac);
  if (CRYPTO_memcmp(mac, raw + kPayloadBytes, sizeof(mac)) != 0) {
    return false;
  }
  *expiry_unix_seconds = static_cast<int64_t>(Get64(raw + 1));
  *backend_id = Get64(raw + 9);
  return true;
}

namespace {

class StickySelector final : public Selector {
 public:
  StickySelector(const Table& table, std::vector<uint32_t> members,
                 std::vector<std::pair<uint64_t, uint32_t>> ids,
                 std::unique_ptr<const Selector> fallback, absl::Duration ttl)
      : table_(table),
        members_(std::move(members)),
        ids_(std::move(ids)),
        fallback_(std::move(fallback)),
        codec_(*table.session_key(), table.group()),
        ttl_(ttl) {}

  size_t Pick(const PickRequest& request,
              absl::Span<uint32_t> out) const noexcept override {
    if (out.empty()) {
      return 0;
    }
    const absl::Time now = request.wall_now == absl::InfinitePast()
                               ? absl::Now()
                               : request.wall_now;
    int64_t honoured = -1;
    int64_t expiry = 0;
    if (!request.session_token.empty()) {
      uint64_t id = 0;
      if (codec_.Open(request.session_token, &id, &expiry) &&
          now < absl::FromUnixSeconds(expiry)) {
        const int64_t index = Lookup(id);
        if (index >= 0 && table_.eligible(static_cast<uint32_t>(index)) &&
            !pick_internal::Contains(request.exclude,
                                     static_cast<uint32_t>(index))) {
          honoured = index;
        }
      }
    }
    if (honoured < 0) {
      const size_t n = fallback_->Pick(request, out);
      if (n > 0 && request.issued_token != nullptr) {
        Issue(out[0], now, *request.issued_token);
      }
      return n;
    }
    const uint32_t first = static_cast<uint32_t>(honoured);
    out[0] = first;
    size_t count = 1;
    if (out.size() > 1) {
      const size_t n = fallback_->Pick(request, out.subspan(1));
      for (size_t i = 1; i <= n; ++i) {
        if (out[i] != first) {
          out[count++] = out[i];
        }
      }
      if (count < out.size()) {
        count =
            pick_internal::FillByWalk(table_, request, members_, 0, out, count);
      }
    }
    if (request.issued_token != nullptr) {
      request.issued_token->size = 0;  // keep the presented token ...
      if (absl::FromUnixSeconds(expiry) - now < ttl_ / 2) {
        Issue(first, now, *request.issued_token);  // ... unless half spent
      }
    }
    return count;
  }

  const Selector& fallback() const { return *fallback_; }

 private:
  int64_t Lookup(uint64_t id) const noexcept {
    auto it = std::lower_bound(ids_.begin(), ids_.end(), id,
                               [](const std::pair<uint64_t, uint32_t>& e,
                                  uint64_t v) { return e.first < v; });
    if (it == ids_.end() || it->first != id) {
      return -1;
    }
    return it->second;
  }

  void Issue(uint32_t index, absl::Time now,
             SessionToken& token) const noexcept {
    codec_.Issue(StickyBackendId(table_.member(index).backend.address),
                 absl::ToUnixSeconds(now + ttl_), token);
  }

  const Table& table_;
  std::vector<uint32_t> members_;
  // (backend id, member index), sorted by id.
  std::vector<std::pair<uint64_t, uint32_t>> ids_;
  std::unique_ptr<const Selector> fallback_;
  StickyTokenCodec codec_;
  absl::Duration ttl_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<const Selector>> BuildStickySelector(
    const SelectorInput& input, const PolicyConfig& config) {
  const Table& table = *input.table;
  if (!table.session_key() || table.session_key()->size() < 16) {
    return absl::InvalidArgumentError(
        "policy.sticky: a session key of at least 16 bytes is required");
  }
  SelectorInput child = input;
  const auto* prev = dynamic_cast<const StickySelector*>(input.previous);
  child.previous = prev != nullptr ? &prev->fallback() : nullptr;
  auto fallback = BuildSelector(config.child_or_default(), child);
  if (!fallback.ok()) {
    return fallback.status();
  }
  std::vector<std::pair<uint64_t, uint32_t>> ids;
  ids.reserve(input.members.size());
  for (uint32_t index : input.members) {
    ids.emplace_back(StickyBackendId(table.member(index).backend.address),
                     index);
  }
  std::sort(ids.begin(), ids.end());
  return std::unique_ptr<const Selector>(std::make_unique<StickySelector>(
      table, std::vector<uint32_t>(input.members.begin(), input.members.end()),
      std::move(ids), *std::move(fallback), config.sticky.ttl));
}

}  // namespace aside
