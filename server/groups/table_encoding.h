// Watch's wire form of a group's table: a full table and the delta from the
// table published before it, each serialized at most once per generation
// (the full table only when a subscriber needs it) and shared (as
// reference-counted byte buffers) by every subscriber. A subscriber that is
// further behind (its last write was still in flight when newer tables
// came) gets one combined delta from the generation it holds, if that is
// one of the group's last kDeltaBases tables: made once per (generation,
// base) on first use and shared the same way.
#ifndef ASIDE_SERVER_GROUPS_TABLE_ENCODING_H_
#define ASIDE_SERVER_GROUPS_TABLE_ENCODING_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "aside/v1/lookaside.pb.h"
#include "lib/sync.h"
#include "lib/table.h"

namespace aside::server {

// The tables before the current one a group keeps as delta bases.
inline constexpr size_t kDeltaBases = 8;

// Shared, immutable once made (full() serialises on first use, once, under
// its own once_flag; DeltaFrom() caches under its own mutex): any number of
// threads may read one.
class EncodedUpdate {
 public:
  EncodedUpdate(std::shared_ptr<const Table> table, std::string server_id)
      : table_(std::move(table)), server_id_(std::move(server_id)) {}

  uint64_t generation = 0;
  // Generation of the table the delta applies to (0: no delta).
  uint64_t base_generation = 0;
  // GroupUpdate{delta}, present only when smaller than the full table.
  std::optional<grpc::ByteBuffer> delta;
  size_t delta_bytes = 0;
  // The delta has `confirm` set: it takes a backend out (TakesBackendOut).
  // The full table always has it.
  bool delta_confirm = false;

  // GroupUpdate{full}. Serialised when first asked for: a generation that
  // every subscriber takes as a delta never pays for the whole table.
  const grpc::ByteBuffer& full() const;
  size_t full_bytes() const;

  // GroupUpdate{delta} from `base` (a generation the subscriber holds) to
  // this one: the one-step delta for base_generation, a combined delta for
  // an older base among the group's recent tables, or null (base unknown, or
  // the delta not smaller than the full table: send full()). Each is made
  // once; the pointer stays valid as long as this object. `*bytes` (if not
  // null) gets its size, `*confirm` (if not null) whether it has `confirm`
  // set.
  const grpc::ByteBuffer* DeltaFrom(uint64_t base, size_t* bytes = nullptr,
                                    bool* confirm = nullptr) const;

 private:
  friend std::shared_ptr<const EncodedUpdate> EncodeUpdate(
      const Table* previous, const std::shared_ptr<const Table>& current,
      const std::string& server_id,
      std::vector<std::shared_ptr<const Table>> bases);
  void EncodeFull() const;
  // The delta from `base` to table_ if it is the smaller, else nullopt.
  std::optional<std::string> SmallerDelta(const Table& base) const;

  struct Combined {
    std::optional<grpc::ByteBuffer> delta;  // nullopt: full is smaller
    size_t bytes = 0;
    bool confirm = false;
  };

  const std::shared_ptr<const Table> table_;
  const std::string server_id_;
  // Older tables than the delta's base, newest first (at most
  // kDeltaBases - 1).
  std::vector<std::shared_ptr<const Table>> older_bases_;
  mutable std::once_flag full_once_;
  mutable grpc::ByteBuffer full_;
  mutable size_t full_bytes_ = 0;
  mutable aside::Mutex combined_mu_;
  // By base generation; node-based so that pointers stay valid.
  mutable std::map<uint64_t, Combined> combined_ ABSL_GUARDED_BY(combined_mu_);
};

// Whether `current` takes out a backend `previous` let subscribers pick:
// one that is absent from `current`, or drained there and not before. Such
// an update carries `confirm` (WatchConfirmed subscribers answer it).
bool TakesBackendOut(const Table& previous, const Table& current);

// Fills `delta` with what changed from `previous` to `current` (same group).
void MakeDelta(const Table& previous, const Table& current,
               v1::TableDelta* delta);

// Encodes `current`'s delta from `previous` (if given) and, when needed to
// tell whether the delta is the smaller, the full table; `server_id` goes
// into every update. `bases` are the group's recent tables older than
// `current`, any order (combined deltas are made from them on demand).
std::shared_ptr<const EncodedUpdate> EncodeUpdate(
    const Table* previous, const std::shared_ptr<const Table>& current,
    const std::string& server_id,
    std::vector<std::shared_ptr<const Table>> bases = {});

// GroupUpdate{removed} for a deleted group.
grpc::ByteBuffer EncodeRemoved(const std::string& group, uint64_t generation,
                               const std::string& reason,
                               const std::string& server_id);

// A delta from `generation` to itself: tells a resuming subscriber that
// what it holds is current (with `confirm` set: the subscriber's answer
// tells the server it holds that generation).
grpc::ByteBuffer EncodeUnchanged(const std::string& group, uint64_t generation,
                                 const std::string& server_id);

grpc::ByteBuffer ToByteBuffer(const google::protobuf::Message& message);

}  // namespace aside::server

#endif  // ASIDE_SERVER_GROUPS_TABLE_ENCODING_H_
