#include "server/load/load_view_codec.h"

#include <tuple>

#include "absl/strings/str_cat.h"
#include "server/load/orca_collector.h"

namespace aside::server {
namespace {

std::string EntryKey(const SourceAggregate& a) {
  return absl::StrCat(a.group, "\n", a.address, "\n", a.source);
}

// -1, 0, 1 as a's key sorts before, with or after b's.
int CompareKeys(const SourceAggregate& a, const SourceAggregate& b) {
  const auto ka = std::tie(a.group, a.address, a.source);
  const auto kb = std::tie(b.group, b.address, b.source);
  return ka < kb ? -1 : (kb < ka ? 1 : 0);
}

void ToProto(const SourceAggregate& a, uint32_t id, bool with_key,
             v1::SourceLoad* out) {
  out->set_id(id);
  if (with_key) {
    out->set_group(a.group);
    out->set_address(a.address);
    out->set_source(a.source);
  }
  out->set_requests(a.requests);
  out->set_failures(a.failures);
  out->set_latency_sum_nanos(a.latency_sum_nanos);
  out->set_first_byte_latency_sum_nanos(a.first_byte_sum_nanos);
  out->set_first_byte_requests(a.first_byte_requests);
  out->set_in_flight(a.in_flight);
  out->set_consecutive_failures(a.consecutive_failures);
  out->set_reporters(a.reporters);
  if (a.utilization.has_value()) {
    out->set_utilization(*a.utilization);
  }
}

void ToProto(const GroupCallTotals& c, v1::GroupCalls* out) {
  out->set_group(c.group);
  out->set_calls_started(c.calls_started);
  out->set_calls_finished(c.calls_finished);
  out->set_failed_to_send(c.failed_to_send);
  out->set_known_received(c.known_received);
  for (const auto& [token, n] : c.dropped) {
    (*out->mutable_dropped())[token] = n;
  }
  out->set_lrs_dropped(c.lrs_dropped);
}

}  // namespace

std::shared_ptr<const ExportedLoads> ExportIds::Next(LocalLoads loads) {
  auto out = std::make_shared<ExportedLoads>();
  out->ids.reserve(loads.sources.size());
  absl::flat_hash_map<std::string, uint32_t> ids;
  ids.reserve(loads.sources.size());
  for (const SourceAggregate& a : loads.sources) {
    std::string key = EntryKey(a);
    uint32_t id;
    if (auto it = ids_.find(key); it != ids_.end()) {
      id = it->second;
    } else {
      id = next_++;
      if (next_ == 0) {
        next_ = 1;  // 0 means "no id" on the wire
      }
    }
    out->ids.push_back(id);
    ids.emplace(std::move(key), id);
  }
  ids_ = std::move(ids);
  out->loads = std::move(loads);
  return out;
}

v1::LoadViewUpdate DiffExports(const ExportedLoads* prev,
                               const ExportedLoads& cur) {
  v1::LoadViewUpdate u;
  u.set_snapshot(prev == nullptr);
  static const ExportedLoads kEmpty;
  const ExportedLoads& p = prev != nullptr ? *prev : kEmpty;
  const auto& ps = p.loads.sources;
  const auto& cs = cur.loads.sources;
  size_t i = 0;
  size_t j = 0;
  while (i < ps.size() || j < cs.size()) {
    const int c = i == ps.size()   ? 1
                  : j == cs.size() ? -1
                                   : CompareKeys(ps[i], cs[j]);
    if (c < 0) {
      u.add_removed(p.ids[i]);
      ++i;
    } else if (c > 0) {
      ToProto(cs[j], cur.ids[j], /*with_key=*/true, u.add_loads());
      ++j;
    } else {
      if (p.ids[i] != cur.ids[j]) {
        u.add_removed(p.ids[i]);
        ToProto(cs[j], cur.ids[j], /*with_key=*/true, u.add_loads());
      } else if (!(ps[i] == cs[j])) {
        ToProto(cs[j], cur.ids[j], /*with_key=*/false, u.add_loads());
      }
      ++i;
      ++j;
    }
  }
  // ORCA reports: sent when their report is new (both lists are sorted by
  // address).
  const auto& po = p.loads.orca;
  size_t o = 0;
  for (const OrcaShare& share : cur.loads.orca) {
    while (o < po.size() && po[o].address < share.address) {
      ++o;
    }
    if (o < po.size() && po[o] == share) {
      continue;
    }
    v1::OrcaReport* r = u.add_orca();
    r->set_address(share.address);
    r->set_cpu_utilization(share.load.cpu_utilization);
    r->set_application_utilization(share.load.application_utilization);
    r->set_qps(share.load.qps);
    r->set_eps(share.load.eps);
    r->set_seq(share.seq);
    r->set_owner(share.owner);
  }
  // Group calls: sent whole when new or changed (they only grow).
  const auto& pc = p.loads.calls;
  size_t k = 0;
  for (const GroupCallTotals& c : cur.loads.calls) {
    while (k < pc.size() && pc[k].group < c.group) {
      ++k;
    }
    if (k < pc.size() && pc[k] == c) {
      continue;
    }
    ToProto(c, u.add_group_calls());
  }
  return u;
}

PeerLoadUpdate LoadViewDecoder::Decode(const v1::LoadViewUpdate& u,
                                       std::vector<std::string>* rejected,
                                       std::vector<int>* proto_index) {
  PeerLoadUpdate out;
  out.snapshot = u.snapshot();
  if (u.snapshot()) {
    keys_.clear();
  }
  for (int i = 0; i < u.removed_size(); ++i) {
    auto it = keys_.find(u.removed(i));
    if (it == keys_.end()) {
      rejected->push_back(
          absl::StrCat("removed[", i, "]: unknown entry ", u.removed(i)));
      continue;
    }
    out.removed.push_back(std::move(it->second));
    keys_.erase(it);
  }
  for (int i = 0; i < u.loads_size(); ++i) {
    const v1::SourceLoad& in = u.loads(i);
    const std::string field = absl::StrCat("loads[", i, "].");
    if (in.id() == 0) {
      rejected->push_back(absl::StrCat(field, "id: required"));
      continue;
    }
    SourceAggregate a;
    const bool keyed =
        !in.group().empty() || !in.address().empty() || !in.source().empty();
    if (keyed) {
      if (in.group().empty() || in.address().empty() || in.source().empty()) {
        rejected->push_back(absl::StrCat(
            field, "group, address and source: all or none (entry ", in.id(),
            ")"));
        continue;
      }
      if (!keys_.contains(in.id()) && keys_.size() >= kMaxEntries) {
        rejected->push_back(absl::StrCat(field, "id: more than ", kMaxEntries,
                                         " entries on one stream"));
        continue;
      }
      keys_[in.id()] = {in.group(), in.address(), in.source()};
    }
    auto it = keys_.find(in.id());
    if (it == keys_.end()) {
      rejected->push_back(
          absl::StrCat(field, "id: unknown entry ", in.id(),
                       " (its group, address and source were never sent)"));
      continue;
    }
    a.group = it->second.group;
    a.address = it->second.address;
    a.source = it->second.source;
    a.requests = in.requests();
    a.failures = in.failures();
    a.latency_sum_nanos = in.latency_sum_nanos();
    a.first_byte_sum_nanos = in.first_byte_latency_sum_nanos();
    a.first_byte_requests = in.first_byte_requests();
    a.in_flight = in.in_flight();
    a.consecutive_failures = in.consecutive_failures();
    a.reporters = in.reporters();
    if (in.has_utilization()) {
      a.utilization = in.utilization();
    }
    out.loads.push_back(std::move(a));
    proto_index->push_back(i);
  }
  for (const v1::GroupCalls& in : u.group_calls()) {
    GroupCallTotals c;
    c.group = in.group();
    c.calls_started = in.calls_started();
    c.calls_finished = in.calls_finished();
    c.failed_to_send = in.failed_to_send();
    c.known_received = in.known_received();
    c.dropped.insert(in.dropped().begin(), in.dropped().end());
    c.lrs_dropped = in.lrs_dropped();
    out.calls.push_back(std::move(c));
  }
  for (int i = 0; i < u.orca_size(); ++i) {
    const v1::OrcaReport& in = u.orca(i);
    OrcaShare share;
    share.address = in.address();
    share.load.cpu_utilization = in.cpu_utilization();
    share.load.application_utilization = in.application_utilization();
    share.load.qps = in.qps();
    share.load.eps = in.eps();
    share.seq = in.seq();
    share.owner = in.owner();
    if (std::string why;
        share.address.empty() || !CheckOrcaLoad(share.load, &why)) {
      rejected->push_back(absl::StrCat(
          "orca[", i, "].",
          share.address.empty() ? std::string("address: required") : why));
      continue;
    }
    out.orca.push_back(std::move(share));
  }
  return out;
}

}  // namespace aside::server
