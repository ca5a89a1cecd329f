// The copy-on-write group map: a change makes a new map and leaves every
// earlier snapshot as it was, whatever shard the change lands in.
#include "server/groups/group_map.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "absl/strings/str_cat.h"

namespace aside::server {
namespace {

using Map = ShardedMap<int>;

std::map<std::string, int> Contents(const Map& m) {
  std::map<std::string, int> out;
  m.ForEach([&](const std::string& k, int v) { out.emplace(k, v); });
  return out;
}

TEST(ShardedMapTest, ChangesLeaveEarlierSnapshotsAlone) {
  auto empty = std::make_shared<const Map>();
  std::shared_ptr<const Map> m = empty;
  std::map<std::string, int> expected;
  // Enough names to fill every shard several times over.
  for (int i = 0; i < 1000; ++i) {
    const std::string name = absl::StrCat("group-", i);
    std::shared_ptr<const Map> before = m;
    const std::map<std::string, int> before_contents = expected;
    m = m->With(name, i);
    expected[name] = i;
    EXPECT_EQ(Contents(*before), before_contents);
    EXPECT_EQ(before->size(), before_contents.size());
    EXPECT_FALSE(before->contains(name));
  }
  EXPECT_EQ(Contents(*m), expected);
  EXPECT_EQ(m->size(), 1000u);
  EXPECT_EQ(empty->size(), 0u);
  ASSERT_NE(m->find("group-7"), nullptr);
  EXPECT_EQ(*m->find("group-7"), 7);
  EXPECT_EQ(m->find("group-1000"), nullptr);

  // Replacing keeps the size; removing an absent name changes nothing.
  auto replaced = m->With("group-7", 70);
  EXPECT_EQ(replaced->size(), 1000u);
  EXPECT_EQ(*replaced->find("group-7"), 70);
  EXPECT_EQ(*m->find("group-7"), 7);
  auto same = m->Without("no-such-group");
  EXPECT_EQ(Contents(*same), expected);
  EXPECT_EQ(same->size(), 1000u);

  // Removing every entry empties the map; the full snapshot is untouched.
  std::shared_ptr<const Map> shrinking = m;
  for (int i = 0; i < 1000; ++i) {
    shrinking = shrinking->Without(absl::StrCat("group-", i));
    EXPECT_EQ(shrinking->size(), static_cast<size_t>(999 - i));
  }
  EXPECT_TRUE(Contents(*shrinking).empty());
  EXPECT_EQ(Contents(*m), expected);
}

}  // namespace
}  // namespace aside::server
