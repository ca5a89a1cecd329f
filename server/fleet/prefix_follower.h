// Followers of the fleet's prefixes in etcd (members/, health/): an
// etcd::Follower (server/store/etcd/etcd_follower.h) whose snapshot reads every
// key under the prefix, logging fleet.unavailable while etcd cannot be read
// and fleet.compacted before a fresh snapshot.
#ifndef ASIDE_SERVER_FLEET_PREFIX_FOLLOWER_H_
#define ASIDE_SERVER_FLEET_PREFIX_FOLLOWER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "server/store/etcd/etcd_client.h"
#include "server/store/etcd/etcd_follower.h"

namespace aside::server::fleet {

// Not started. `on_snapshot` gets every key under `prefix` as of a
// revision and replaces what came before; `on_events` the changes after
// it. `client` must outlive the follower.
std::unique_ptr<etcd::Follower> FollowPrefix(
    etcd::EtcdClient* client, const std::string& prefix,
    absl::AnyInvocable<void(std::vector<etcd::KeyValue> kvs, int64_t revision)>
        on_snapshot,
    absl::AnyInvocable<void(etcd::WatchBatch batch)> on_events);

}  // namespace aside::server::fleet

#endif  // ASIDE_SERVER_FLEET_PREFIX_FOLLOWER_H_
