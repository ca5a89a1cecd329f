// Watch's wire form: a delta is sent only when smaller than the full table,
// and the full table (serialised only when asked for) is the whole table.
#include "server/groups/table_encoding.h"

#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/convert.h"

namespace aside::server {
namespace {

TableConstPtr MakeTable(uint64_t generation, const std::vector<Member>& m) {
  TableSpec spec;
  spec.group = "g";
  spec.generation = generation;
  spec.members = m;
  return *Table::Create(std::move(spec), nullptr, nullptr);
}

std::vector<Member> Members(int n, const std::string& prefix = "10.0.0.") {
  std::vector<Member> out;
  for (int i = 1; i <= n; ++i) {
    Member m;
    m.backend.address = absl::StrCat(prefix, i, ":80");
    out.push_back(m);
  }
  return out;
}

v1::GroupUpdate Parse(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  v1::GroupUpdate update;
  EXPECT_TRUE(update.ParseFromString(bytes));
  return update;
}

TEST(TableEncodingTest, OneChangeIsADeltaAndTheFullTableIsWhole) {
  std::vector<Member> members = Members(50);
  TableConstPtr before = MakeTable(1, members);
  members[20].weight = 7;
  TableConstPtr after = MakeTable(2, members);

  std::shared_ptr<const EncodedUpdate> u =
      EncodeUpdate(before.get(), after, "s");
  EXPECT_EQ(u->generation, 2u);
  ASSERT_TRUE(u->delta.has_value());
  EXPECT_EQ(u->base_generation, 1u);
  const v1::GroupUpdate delta = Parse(*u->delta);
  EXPECT_EQ(u->delta_bytes, delta.ByteSizeLong());
  EXPECT_EQ(delta.server_id(), "s");
  ASSERT_EQ(delta.delta().upserted_size(), 1);
  EXPECT_EQ(delta.delta().upserted(0).backend().address(), "10.0.0.21:80");
  EXPECT_EQ(delta.delta().upserted(0).effective_weight(), 7u);

  const v1::GroupUpdate full = Parse(u->full());
  v1::Table expected;
  ToProto(*after, &expected);
  EXPECT_EQ(full.full().SerializeAsString(), expected.SerializeAsString());
  EXPECT_EQ(full.generation(), 2u);
  EXPECT_EQ(u->full_bytes(), full.ByteSizeLong());
  EXPECT_LT(u->delta_bytes, u->full_bytes());
}

TEST(TableEncodingTest, NoDeltaWhenItIsNotSmaller) {
  // Every member replaced: the delta lists all of them and all removals.
  TableConstPtr before = MakeTable(1, Members(5, "10.0.0."));
  TableConstPtr after = MakeTable(2, Members(5, "10.0.1."));
  std::shared_ptr<const EncodedUpdate> u =
      EncodeUpdate(before.get(), after, "s");
  EXPECT_FALSE(u->delta.has_value());
  EXPECT_EQ(u->base_generation, 0u);
  EXPECT_EQ(Parse(u->full()).full().backends_size(), 5);

  // Without a previous table there is only the full one.
  std::shared_ptr<const EncodedUpdate> first =
      EncodeUpdate(nullptr, after, "s");
  EXPECT_FALSE(first->delta.has_value());
  EXPECT_EQ(Parse(first->full()).full().backends_size(), 5);
}

}  // namespace
}  // namespace aside::server

namespace aside::server {
namespace {

// A subscriber three generations behind gets one delta from what it holds:
// the changes of all three, a fraction of the full table.
TEST(TableEncodingTest, ASubscriberBehindGetsOneCombinedDelta) {
  std::vector<Member> members = Members(500);
  std::vector<TableConstPtr> tables = {MakeTable(1, members)};
  for (uint64_t g = 2; g <= 4; ++g) {
    members[g * 10].weight = static_cast<uint32_t>(g);
    tables.push_back(MakeTable(g, members));
  }
  std::shared_ptr<const EncodedUpdate> u = EncodeUpdate(
      tables[2].get(), tables[3], "s", {tables[0], tables[1], tables[2]});
  size_t one_step = 0;
  ASSERT_NE(u->DeltaFrom(3, &one_step), nullptr);
  EXPECT_EQ(one_step, u->delta_bytes);
  size_t combined = 0;
  const grpc::ByteBuffer* from_one = u->DeltaFrom(1, &combined);
  ASSERT_NE(from_one, nullptr);
  const v1::GroupUpdate delta = Parse(*from_one);
  EXPECT_EQ(delta.generation(), 4u);
  EXPECT_EQ(delta.delta().base_generation(), 1u);
  EXPECT_EQ(delta.delta().upserted_size(), 3);  // the three changed members
  EXPECT_LT(combined, 4 * one_step);
  EXPECT_LT(combined * 20, u->full_bytes());
  std::cout << "event=combined_delta one_step_bytes=" << one_step
            << " three_behind_bytes=" << combined
            << " full_bytes=" << u->full_bytes() << "\n";
  // Made once: the same buffer for every subscriber.
  EXPECT_EQ(u->DeltaFrom(1), from_one);
  // Unknown bases, and the current generation, get no delta.
  EXPECT_EQ(u->DeltaFrom(0), nullptr);
  EXPECT_EQ(u->DeltaFrom(4), nullptr);
  EXPECT_EQ(u->DeltaFrom(99), nullptr);
}

TEST(TableEncodingTest, ACombinedDeltaLargerThanTheTableIsNotMade) {
  TableConstPtr first = MakeTable(1, Members(20, "10.0.0."));
  TableConstPtr second = MakeTable(2, Members(20, "10.1.0."));
  TableConstPtr third = MakeTable(3, Members(20, "10.2.0."));
  std::shared_ptr<const EncodedUpdate> u =
      EncodeUpdate(second.get(), third, "s", {first, second});
  // Every member replaced: removals and upserts outweigh the table.
  EXPECT_EQ(u->DeltaFrom(1), nullptr);
}

TEST(TableEncodingTest, OnlyTheLastBasesAreKept) {
  std::vector<Member> members = Members(100);
  std::vector<TableConstPtr> bases;
  for (uint64_t g = 1; g <= 20; ++g) {
    members[g].weight = static_cast<uint32_t>(g);
    bases.push_back(MakeTable(g, members));
  }
  members[50].weight = 9;
  TableConstPtr current = MakeTable(21, members);
  std::shared_ptr<const EncodedUpdate> u =
      EncodeUpdate(bases.back().get(), current, "s", bases);
  EXPECT_NE(u->DeltaFrom(21 - kDeltaBases), nullptr);
  EXPECT_EQ(u->DeltaFrom(20 - kDeltaBases), nullptr);
}

}  // namespace
}  // namespace aside::server
