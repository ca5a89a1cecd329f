#include "lib/policies/sticky.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <array>
#include <set>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/tables.h"

namespace aside {
namespace {

using ::aside::testing::MakeTableSpec;
using ::aside::testing::StatusIs;
using ::aside::testing::TableOptions;
using ::testing::HasSubstr;

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

std::shared_ptr<const std::string> Key(char fill = 'k') {
  return std::make_shared<const std::string>(32, fill);
}

PolicyConfig Sticky(absl::Duration ttl = absl::Hours(1)) {
  PolicyConfig c;
  c.kind = PolicyKind::kSticky;
  c.sticky.ttl = ttl;
  return c;
}

TableConstPtr Make(TableOptions options,
                   const PolicyConfig& policy = Sticky()) {
  if (!options.session_key) {
    options.session_key = Key();
  }
  auto t = Table::Create(MakeTableSpec(policy, options), nullptr, nullptr);
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

struct Result {
  std::vector<uint32_t> picks;
  std::string issued;
};

Result Pick(const Table& t, absl::string_view token, absl::Time now = kNow,
            size_t count = 1, absl::Span<const uint32_t> exclude = {}) {
  std::vector<uint32_t> out(count);
  SessionToken issued;
  PickRequest r;
  r.session_token = token;
  r.wall_now = now;
  r.issued_token = &issued;
  r.exclude = exclude;
  out.resize(t.Pick(r, absl::MakeSpan(out)));
  return {out, std::string(issued.view())};
}

TEST(StickyTest, RequiresASessionKey) {
  TableOptions options{.weights = {1}};
  options.session_key = std::make_shared<const std::string>("short");
  EXPECT_THAT(
      Table::Create(MakeTableSpec(Sticky(), options), nullptr, nullptr),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("session key")));
}

TEST(StickyTest, TokenRoundTripHonoursTheBackend) {
  TableConstPtr t = Make({.weights = {1, 1, 1, 1}});
  for (int i = 0; i < 8; ++i) {
    Result first = Pick(*t, "");
    ASSERT_EQ(first.picks.size(), 1u);
    ASSERT_EQ(first.issued.size(), kStickyTokenChars);
    for (int j = 0; j < 5; ++j) {
      Result again = Pick(*t, first.issued, kNow + absl::Minutes(j));
      ASSERT_EQ(again.picks, first.picks);
      EXPECT_EQ(again.issued, "");  // fresh: keep the token you have
    }
  }
}

TEST(StickyTest, TokenIsAnHmacSha256OverVersionExpiryAndBackend) {
  TableConstPtr t = Make({.weights = {1, 1}});
  Result r = Pick(*t, "");
  std::string raw;
  ASSERT_TRUE(absl::WebSafeBase64Unescape(r.issued, &raw));
  ASSERT_EQ(raw.size(), kStickyTokenBytes);
  EXPECT_EQ(raw[0], 1);
  int64_t expiry = 0;
  uint64_t id = 0;
  for (int i = 7; i >= 0; --i) {
    expiry = (expiry << 8) | static_cast<unsigned char>(raw[1 + i]);
    id = (id << 8) | static_cast<unsigned char>(raw[9 + i]);
  }
  EXPECT_EQ(expiry, absl::ToUnixSeconds(kNow + absl::Hours(1)));
  EXPECT_EQ(id, StickyBackendId(t->member(r.picks[0]).backend.address));
  const std::string message =
      absl::StrCat("aside-sticky-v1\n", "test", "\n", raw.substr(0, 17));
  unsigned char mac[32];
  unsigned int mac_len = 0;
  const std::string key = *Key();
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(),
       mac, &mac_len);
  ASSERT_EQ(mac_len, 32u);
  EXPECT_EQ(raw.substr(17), std::string(reinterpret_cast<char*>(mac), 32));
}

TEST(StickyTest, LongKeysAreHashedFirstAsHmacSays) {
  TableOptions options{.weights = {1}};
  options.session_key = std::make_shared<const std::string>(100, 'x');
  TableConstPtr t = Make(options);
  Result r = Pick(*t, "");
  std::string raw;
  ASSERT_TRUE(absl::WebSafeBase64Unescape(r.issued, &raw));
  const std::string message =
      absl::StrCat("aside-sticky-v1\n", "test", "\n", raw.substr(0, 17));
  unsigned char mac[32];
  unsigned int mac_len = 0;
  HMAC(EVP_sha256(), options.session_key->data(), 100,
       reinterpret_cast<const unsigned char*>(message.data()), message.size(),
       mac, &mac_len);
  EXPECT_EQ(raw.substr(17), std::string(reinterpret_cast<char*>(mac), 32));
}

TEST(StickyTest, ForgedTokensAreIgnoredAndReplaced) {
  TableConstPtr t = Make({.weights = {1, 1, 1, 1}});
  Result first = Pick(*t, "");
  // Flip each character in turn (a different valid base64url character).
  for (size_t i = 0; i < first.issued.size(); ++i) {
    std::string forged = first.issued;
    forged[i] = forged[i] == 'A' ? 'B' : 'A';
    Result r = Pick(*t, forged);
    ASSERT_EQ(r.picks.size(), 1u);
    ASSERT_EQ(r.issued.size(), kStickyTokenChars) << i;  // replaced
    ASSERT_NE(r.issued, forged);
  }
  // Signed with another key, or for another group with the same key.
  TableConstPtr other_key =
      Make({.weights = {1, 1, 1, 1}, .session_key = Key('z')});
  TableConstPtr other_group = Make({.weights = {1, 1, 1, 1}, .group = "g2"});
  for (const TableConstPtr& issuer : {other_key, other_group}) {
    Result foreign = Pick(*issuer, "");
    Result r = Pick(*t, foreign.issued);
    EXPECT_FALSE(r.issued.empty());
  }
}

TEST(StickyTest, MalformedTokensAreIgnoredAndReplaced) {
  TableConstPtr t = Make({.weights = {1, 1}});
  const std::string valid = Pick(*t, "").issued;
  for (const std::string& bad :
       {std::string("x"), std::string(66, '='), valid.substr(1), valid + "A",
        std::string(66, '\0'), std::string(1024, 'A'),
        valid.substr(0, 65) + "B"}) {  // non-zero padding bits
    Result r = Pick(*t, bad);
    ASSERT_EQ(r.picks.size(), 1u);
    EXPECT_EQ(r.issued.size(), kStickyTokenChars);
  }
}

TEST(StickyTest, ExpiredTokensAreReplaced) {
  TableConstPtr t = Make({.weights = {1, 1, 1}}, Sticky(absl::Minutes(10)));
  Result first = Pick(*t, "");
  Result late = Pick(*t, first.issued, kNow + absl::Minutes(10));
  EXPECT_FALSE(late.issued.empty());
  EXPECT_NE(late.issued, first.issued);
  // The new one is valid from then on, for the ttl.
  Result again = Pick(*t, late.issued, kNow + absl::Minutes(12));
  EXPECT_EQ(again.picks, late.picks);
}

TEST(StickyTest, HonouredTokensAreRefreshedOnceHalfTheTtlIsSpent) {
  TableConstPtr t = Make({.weights = {1, 1, 1}}, Sticky(absl::Minutes(10)));
  Result first = Pick(*t, "");
  EXPECT_EQ(Pick(*t, first.issued, kNow + absl::Minutes(4)).issued, "");
  Result refreshed = Pick(*t, first.issued, kNow + absl::Minutes(6));
  ASSERT_FALSE(refreshed.issued.empty());
  EXPECT_EQ(refreshed.picks, first.picks);
  // The refreshed token outlives the first one.
  EXPECT_EQ(Pick(*t, refreshed.issued, kNow + absl::Minutes(14)).picks,
            first.picks);
}

TEST(StickyTest, BackendGoneOrUnreadyFallsBackWithANewToken) {
  TableConstPtr t = Make({.weights = {1, 1, 1}});
  Result first = Pick(*t, "");
  const uint32_t chosen = first.picks[0];

  std::vector<bool> ready(3, true);
  ready[chosen] = false;
  TableConstPtr unready = Make({.weights = {1, 1, 1}, .ready = ready});
  Result r = Pick(*unready, first.issued);
  ASSERT_EQ(r.picks.size(), 1u);
  EXPECT_NE(r.picks[0], chosen);
  ASSERT_FALSE(r.issued.empty());
  EXPECT_EQ(Pick(*unready, r.issued).picks, r.picks);

  std::vector<uint32_t> weights(3, 1);
  weights[chosen] = 0;  // drained to weight 0
  TableConstPtr drained = Make({.weights = weights});
  EXPECT_NE(Pick(*drained, first.issued).picks[0], chosen);

  // Excluded by this pick (a retry): another backend and a token for it.
  const std::array<uint32_t, 1> exclude = {chosen};
  Result retry = Pick(*t, first.issued, kNow, 1, exclude);
  EXPECT_NE(retry.picks[0], chosen);
  EXPECT_FALSE(retry.issued.empty());
}

TEST(StickyTest, FallbacksFollowTheStickyChoiceDistinctly) {
  TableConstPtr t = Make({.weights = {1, 1, 0, 1}});
  Result first = Pick(*t, "");
  for (int i = 0; i < 20; ++i) {
    Result r = Pick(*t, first.issued, kNow, 4);
    ASSERT_EQ(r.picks.size(), 3u);
    EXPECT_EQ(r.picks[0], first.picks[0]);
    EXPECT_EQ(std::set<uint32_t>(r.picks.begin(), r.picks.end()),
              (std::set<uint32_t>{0, 1, 3}));
  }
}

TEST(StickyTest, UsesItsFallbackPolicy) {
  PolicyConfig policy = Sticky();
  auto child = std::make_shared<PolicyConfig>();
  child->kind = PolicyKind::kKetama;
  policy.child = child;
  TableConstPtr t = Make({.weights = {1, 1, 1, 1, 1}}, policy);
  // Same key, no token: ketama gives the same backend every time.
  std::array<uint32_t, 1> out;
  PickRequest r;
  r.key = "user-7";
  r.wall_now = kNow;
  ASSERT_EQ(t->Pick(r, absl::MakeSpan(out)), 1u);
  const uint32_t first = out[0];
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(t->Pick(r, absl::MakeSpan(out)), 1u);
    EXPECT_EQ(out[0], first);
  }
}

}  // namespace
}  // namespace aside
