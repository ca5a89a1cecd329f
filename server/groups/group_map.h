// An immutable map from group name to group, published whole (copy on
// write) so that readers look groups up without locks. Changing one entry
// copies only the shard that holds it (and the shard pointers), not the
// whole map: adding G groups one by one costs O(G) rather than O(G^2).
//
// Thread-safety: immutable once built; With/Without return a new map and
// leave this one as it was, so any number of threads may read one map.
#ifndef ASIDE_SERVER_GROUPS_GROUP_MAP_H_
#define ASIDE_SERVER_GROUPS_GROUP_MAP_H_

#include <array>
#include <cstddef>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"

namespace aside::server {

template <typename Value>
class ShardedMap {
 public:
  static constexpr size_t kShards = 64;
  using Shard = absl::flat_hash_map<std::string, Value>;

  ShardedMap() {
    for (auto& s : shards_) {
      s = empty();
    }
  }

  // The value under `name`, or null when there is none.
  const Value* find(absl::string_view name) const {
    const Shard& shard = *shards_[ShardOf(name)];
    auto it = shard.find(name);
    return it == shard.end() ? nullptr : &it->second;
  }
  bool contains(absl::string_view name) const { return find(name) != nullptr; }
  size_t size() const { return size_; }

  // Calls fn(name, value) for every entry, in no particular order.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (const auto& shard : shards_) {
      for (const auto& [name, value] : *shard) {
        fn(name, value);
      }
    }
  }

  // This map with `name` set to `value` (added or replaced).
  std::shared_ptr<const ShardedMap> With(const std::string& name,
                                         Value value) const {
    auto next = std::make_shared<ShardedMap>(*this);
    auto shard = std::make_shared<Shard>(*shards_[ShardOf(name)]);
    if (shard->insert_or_assign(name, std::move(value)).second) {
      ++next->size_;
    }
    next->shards_[ShardOf(name)] = std::move(shard);
    return next;
  }

  // This map without `name` (the same contents when it is absent).
  std::shared_ptr<const ShardedMap> Without(absl::string_view name) const {
    auto next = std::make_shared<ShardedMap>(*this);
    auto shard = std::make_shared<Shard>(*shards_[ShardOf(name)]);
    if (shard->erase(name) > 0) {
      --next->size_;
    }
    next->shards_[ShardOf(name)] = std::move(shard);
    return next;
  }

 private:
  static size_t ShardOf(absl::string_view name) {
    return absl::Hash<absl::string_view>{}(name) % kShards;
  }
  static std::shared_ptr<const Shard> empty() {
    static const auto* const kEmpty =
        new std::shared_ptr<const Shard>(std::make_shared<const Shard>());
    return *kEmpty;
  }

  std::array<std::shared_ptr<const Shard>, kShards> shards_;
  size_t size_ = 0;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_GROUPS_GROUP_MAP_H_
