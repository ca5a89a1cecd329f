#include "server/fleet/prefix_follower.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/log.h"

namespace aside::server::fleet {

std::unique_ptr<etcd::Follower> FollowPrefix(
    etcd::EtcdClient* client, const std::string& prefix,
    absl::AnyInvocable<void(std::vector<etcd::KeyValue> kvs, int64_t revision)>
        on_snapshot,
    absl::AnyInvocable<void(etcd::WatchBatch batch)> on_events) {
  return std::make_unique<etcd::Follower>(
      client, prefix,
      etcd::Follower::Handlers{
          .snapshot =
              etcd::RangeSnapshot(client, prefix, std::move(on_snapshot)),
          .on_events = std::move(on_events),
          .on_unavailable =
              [prefix](const absl::Status& s) {
                Log(LogLevel::kWarn, "fleet.unavailable",
                    {{"prefix", prefix}, {"error", std::string(s.message())}});
              },
          .on_compacted =
              [prefix](int64_t compact_revision) {
                Log(LogLevel::kWarn, "fleet.compacted",
                    {{"prefix", prefix},
                     {"compact_revision", absl::StrCat(compact_revision)},
                     {"action", "reloading a snapshot"}});
              }});
}

}  // namespace aside::server::fleet
