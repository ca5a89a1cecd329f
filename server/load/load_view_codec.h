// The LoadView stream's encoding (proto/aside/v1/fleet.proto), apart from
// its transport: what a publisher sends a subscriber to take it from the
// export it last sent to the current one, and how the subscriber reads it
// back into a LoadAggregator update.
//
// Entries are named on the wire by small ids, sent with their key (group,
// address, source) the first time a stream carries them: ExportIds keeps
// an entry's id for as long as it stays in consecutive exports, so an
// unchanged entry costs nothing and a changed one its id and values.
//
// Thread-safety: ExportIds and LoadViewDecoder are not thread-safe (each
// has one owner); ExportedLoads is immutable once built and shared.
#ifndef ASIDE_SERVER_LOAD_LOAD_VIEW_CODEC_H_
#define ASIDE_SERVER_LOAD_LOAD_VIEW_CODEC_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "aside/v1/fleet.pb.h"
#include "server/load/load_aggregator.h"

namespace aside::server {

// One export of this replica's aggregates with the ids its entries carry.
struct ExportedLoads {
  LocalLoads loads;
  std::vector<uint32_t> ids;  // parallel to loads.sources
};

// Assigns ids to consecutive exports.
class ExportIds {
 public:
  std::shared_ptr<const ExportedLoads> Next(LocalLoads loads);

 private:
  // "group\naddress\nsource" -> id, for the entries of the last export.
  absl::flat_hash_map<std::string, uint32_t> ids_;
  uint32_t next_ = 1;
};

// The update that takes a subscriber holding `prev` (null: nothing, and the
// update is a snapshot) to `cur`. Changed entries carry all their values;
// an entry whose id changed is removed and sent anew with its key.
v1::LoadViewUpdate DiffExports(const ExportedLoads* prev,
                               const ExportedLoads& cur);

// Reads one stream's updates (one decoder per stream).
class LoadViewDecoder {
 public:
  // Entries a stream may name at once.
  static constexpr size_t kMaxEntries = 1'000'000;

  // Translates `u`; entries that cannot be read are left out and their
  // reasons, naming the field, appended to `rejected`. `proto_index[i]` is
  // the index in u.loads of the result's loads[i].
  PeerLoadUpdate Decode(const v1::LoadViewUpdate& u,
                        std::vector<std::string>* rejected,
                        std::vector<int>* proto_index);

 private:
  absl::flat_hash_map<uint32_t, PeerLoadUpdate::Key> keys_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_LOAD_LOAD_VIEW_CODEC_H_
