#include "server/groups/table_encoding.h"

#include <algorithm>

#include "proto/convert.h"

namespace aside::server {
namespace {

bool SameMember(const Member& a, const Member& b) {
  return a.backend == b.backend && a.weight == b.weight && a.ready == b.ready &&
         a.health == b.health;
}

void MemberToProto(const Member& m, v1::TableBackend* out) {
  ToProto(m.backend, out->mutable_backend());
  out->set_effective_weight(m.weight);
  out->set_ready(m.ready);
  out->set_health(ToProto(m.health));
}

}  // namespace

bool TakesBackendOut(const Table& previous, const Table& current) {
  // Both member lists are sorted by address.
  const auto& b = current.members();
  size_t j = 0;
  for (const Member& m : previous.members()) {
    if (m.backend.drained) {
      continue;
    }
    while (j < b.size() && b[j].backend.address < m.backend.address) {
      ++j;
    }
    if (j == b.size() || b[j].backend.address != m.backend.address ||
        b[j].backend.drained) {
      return true;
    }
  }
  return false;
}

grpc::ByteBuffer ToByteBuffer(const google::protobuf::Message& message) {
  std::string bytes = message.SerializeAsString();
  grpc::Slice slice(std::move(bytes));
  return grpc::ByteBuffer(&slice, 1);
}

void MakeDelta(const Table& previous, const Table& current,
               v1::TableDelta* delta) {
  delta->set_base_generation(previous.generation());
  // Both member lists are sorted by address: merge them.
  const auto& a = previous.members();
  const auto& b = current.members();
  size_t i = 0;
  size_t j = 0;
  while (i < a.size() || j < b.size()) {
    if (j == b.size() ||
        (i < a.size() && a[i].backend.address < b[j].backend.address)) {
      delta->add_removed(a[i].backend.address);
      ++i;
    } else if (i == a.size() || b[j].backend.address < a[i].backend.address) {
      MemberToProto(b[j], delta->add_upserted());
      ++j;
    } else {
      if (!SameMember(a[i], b[j])) {
        MemberToProto(b[j], delta->add_upserted());
      }
      ++i;
      ++j;
    }
  }
  if (!(previous.policy() == current.policy())) {
    ToProto(current.policy(), delta->mutable_policy());
  }
  delta->set_panic(current.panic());
  if (previous.zone_weights() != current.zone_weights()) {
    delta->set_zone_weights_changed(true);
    for (const ZoneWeight& z : current.zone_weights()) {
      v1::ZoneWeight* zw = delta->add_zone_weights();
      ToProto(z.locality, zw->mutable_locality());
      zw->set_weight(z.weight);
      zw->set_utilization(z.utilization);
      zw->set_host_count(z.host_count);
    }
  }
}

void EncodedUpdate::EncodeFull() const {
  std::call_once(full_once_, [this] {
    v1::GroupUpdate full;
    full.set_group(table_->group());
    full.set_generation(table_->generation());
    full.set_server_id(server_id_);
    full.set_confirm(true);
    ToProto(*table_, full.mutable_full());
    std::string bytes = full.SerializeAsString();
    full_bytes_ = bytes.size();
    grpc::Slice slice(std::move(bytes));
    full_ = grpc::ByteBuffer(&slice, 1);
  });
}

const grpc::ByteBuffer& EncodedUpdate::full() const {
  EncodeFull();
  return full_;
}

size_t EncodedUpdate::full_bytes() const {
  EncodeFull();
  return full_bytes_;
}

std::optional<std::string> EncodedUpdate::SmallerDelta(
    const Table& base) const {
  v1::GroupUpdate delta;
  delta.set_group(table_->group());
  delta.set_generation(table_->generation());
  delta.set_server_id(server_id_);
  delta.set_confirm(TakesBackendOut(base, *table_));
  MakeDelta(base, *table_, delta.mutable_delta());
  std::string delta_bytes = delta.SerializeAsString();
  // The full table carries at least every member's address (a tag and a
  // length byte each): a delta below that bound is the smaller without
  // serialising the full table; otherwise compare with the real size.
  size_t full_floor = 0;
  for (const Member& m : table_->members()) {
    full_floor += m.backend.address.size() + 2;
  }
  if (delta_bytes.size() < full_floor || delta_bytes.size() < full_bytes()) {
    return delta_bytes;
  }
  return std::nullopt;
}

const grpc::ByteBuffer* EncodedUpdate::DeltaFrom(uint64_t base, size_t* bytes,
                                                 bool* confirm) const {
  if (base == 0 || base >= generation) {
    return nullptr;
  }
  if (base == base_generation) {
    if (delta.has_value() && bytes != nullptr) {
      *bytes = delta_bytes;
    }
    if (confirm != nullptr) {
      *confirm = delta_confirm;
    }
    return delta.has_value() ? &*delta : nullptr;
  }
  const Table* from = nullptr;
  for (const auto& t : older_bases_) {
    if (t->generation() == base) {
      from = t.get();
      break;
    }
  }
  if (from == nullptr) {
    return nullptr;
  }
  aside::MutexLock lock(&combined_mu_);
  auto [it, made] = combined_.try_emplace(base);
  if (made) {
    if (std::optional<std::string> d = SmallerDelta(*from); d.has_value()) {
      it->second.bytes = d->size();
      it->second.confirm = TakesBackendOut(*from, *table_);
      grpc::Slice slice(std::move(*d));
      it->second.delta.emplace(&slice, 1);
    }
  }
  if (!it->second.delta.has_value()) {
    return nullptr;
  }
  if (bytes != nullptr) {
    *bytes = it->second.bytes;
  }
  if (confirm != nullptr) {
    *confirm = it->second.confirm;
  }
  return &*it->second.delta;
}

std::shared_ptr<const EncodedUpdate> EncodeUpdate(
    const Table* previous, const std::shared_ptr<const Table>& current,
    const std::string& server_id,
    std::vector<std::shared_ptr<const Table>> bases) {
  auto out = std::make_shared<EncodedUpdate>(current, server_id);
  out->generation = current->generation();
  for (auto& t : bases) {
    if (t != nullptr && t->generation() < current->generation() &&
        (previous == nullptr || t->generation() != previous->generation())) {
      out->older_bases_.push_back(std::move(t));
    }
  }
  std::sort(out->older_bases_.begin(), out->older_bases_.end(),
            [](const auto& a, const auto& b) {
              return a->generation() > b->generation();
            });
  if (out->older_bases_.size() + 1 > kDeltaBases) {
    out->older_bases_.resize(kDeltaBases - 1);
  }
  if (previous != nullptr) {
    if (std::optional<std::string> d = out->SmallerDelta(*previous);
        d.has_value()) {
      out->base_generation = previous->generation();
      out->delta_bytes = d->size();
      out->delta_confirm = TakesBackendOut(*previous, *current);
      grpc::Slice slice(std::move(*d));
      out->delta.emplace(&slice, 1);
    }
  }
  return out;
}

grpc::ByteBuffer EncodeRemoved(const std::string& group, uint64_t generation,
                               const std::string& reason,
                               const std::string& server_id) {
  v1::GroupUpdate update;
  update.set_server_id(server_id);
  update.set_group(group);
  update.set_generation(generation);
  update.mutable_removed()->set_reason(reason);
  return ToByteBuffer(update);
}

grpc::ByteBuffer EncodeUnchanged(const std::string& group, uint64_t generation,
                                 const std::string& server_id) {
  v1::GroupUpdate update;
  update.set_server_id(server_id);
  update.set_group(group);
  update.set_generation(generation);
  update.set_confirm(true);
  update.mutable_delta()->set_base_generation(generation);
  return ToByteBuffer(update);
}

}  // namespace aside::server
