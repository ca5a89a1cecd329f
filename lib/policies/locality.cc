#include "lib/policies/locality.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/time/time.h"
#include "lib/policies/pick_util.h"
#include "lib/selector_factory.h"

namespace aside {

double LocalitySmoothingAlpha(const LocalityParams& params) {
  return 1.0 - std::exp(-absl::FDivDuration(params.update_period,
                                            params.smoothing_time_constant));
}

void AssignZoneWeights(absl::Span<ZoneWeight> zones) {
  double total = 0;
  uint64_t hosts = 0;
  for (ZoneWeight& z : zones) {
    const double u = z.utilization;
    z.weight = static_cast<double>(z.host_count) *
               (u < 0 ? 1.0 : std::max(0.0, 1.0 - u));
    total += z.weight;
    hosts += z.host_count;
  }
  if (total == 0 && hosts > 0) {
    for (ZoneWeight& z : zones) {
      z.weight = static_cast<double>(z.host_count);
    }
  }
}

void CallerZoneShares(absl::Span<const ZoneWeight> zones, int local,
                      const LocalityParams& params, absl::Span<double> shares) {
  const size_t n = zones.size();
  double total_weight = 0;
  for (size_t i = 0; i < n; ++i) {
    shares[i] = std::max(0.0, zones[i].weight);
    total_weight += shares[i];
  }
  if (total_weight == 0) {
    // Weights that say nothing (all zero): share by host count.
    for (size_t i = 0; i < n; ++i) {
      shares[i] = zones[i].host_count;
    }
  }
  if (local < 0 || static_cast<size_t>(local) >= n) {
    return;
  }
  const size_t l = static_cast<size_t>(local);
  auto util = [&](size_t i) {
    return zones[i].utilization < 0 ? 0.0 : zones[i].utilization;
  };
  double remote_util = 0;
  double remote_hosts = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i != l) {
      remote_util += util(i) * zones[i].host_count;
      remote_hosts += zones[i].host_count;
    }
  }
  const double remote_mean = remote_hosts > 0 ? remote_util / remote_hosts : 0;
  // Local preference: everything stays in the caller's zone while it has
  // headroom and is not much busier than the others.
  if (zones[l].host_count > 0 && util(l) < 1.0 &&
      util(l) <= remote_mean + params.utilization_variance_threshold) {
    std::fill(shares.begin(), shares.begin() + n, 0.0);
    shares[l] = 1.0;
  }
  // Remote probing: the remote zones get at least remote_probe_fraction.
  if (params.remote_probe_fraction > 0 && n > 1 && remote_hosts > 0) {
    const double total =
        std::accumulate(shares.begin(), shares.begin() + n, 0.0);
    const double remote = total - shares[l];
    const double target = total * params.remote_probe_fraction;
    if (total > 0 && remote < target) {
      const double deficit = target - remote;
      shares[l] = std::max(0.0, shares[l] - deficit);
      for (size_t i = 0; i < n; ++i) {
        if (i != l) {
          shares[i] += deficit * zones[i].host_count / remote_hosts;
        }
      }
    }
  }
}

ZoneWeightCalculator::ZoneWeightCalculator(const LocalityParams& params)
    : params_(params), alpha_(LocalitySmoothingAlpha(params)) {}

void ZoneWeightCalculator::set_params(const LocalityParams& params) {
  params_ = params;
  alpha_ = LocalitySmoothingAlpha(params);
}

std::vector<ZoneWeight> ZoneWeightCalculator::Update(
    absl::Span<const HostLoadReport> hosts, int64_t now_nanos) {
  struct Acc {
    uint32_t host_count = 0;
    uint32_t fresh = 0;
    double sum = 0;
  };
  std::map<std::pair<std::string, std::string>, Acc> zones;
  const int64_t expiry =
      absl::ToInt64Nanoseconds(params_.weight_expiration_period);
  for (const HostLoadReport& h : hosts) {
    Acc& a = zones[{h.locality.region, h.locality.zone}];
    if (!h.ready) {
      continue;
    }
    ++a.host_count;
    if (std::isfinite(h.utilization) && h.utilization > 0 &&
        now_nanos - h.reported_at_nanos <= expiry) {
      ++a.fresh;
      a.sum += h.utilization;
    }
  }
  std::vector<ZoneWeight> out;
  out.reserve(zones.size());
  for (const auto& [key, a] : zones) {
    ZoneWeight z;
    z.locality.region = key.first;
    z.locality.zone = key.second;
    z.host_count = a.host_count;
    if (a.fresh > 0) {
      const double mean = a.sum / a.fresh;
      auto it = smoothed_.find(key);
      if (it == smoothed_.end()) {
        it = smoothed_.emplace(key, mean).first;
      } else {
        it->second = alpha_ * mean + (1.0 - alpha_) * it->second;
      }
      z.utilization = it->second;
    } else {
      smoothed_.erase(key);
      z.utilization = -1;
    }
    out.push_back(std::move(z));
  }
  // Forget zones that no longer have hosts.
  for (auto it = smoothed_.begin(); it != smoothed_.end();) {
    it = zones.count(it->first) ? std::next(it) : smoothed_.erase(it);
  }
  AssignZoneWeights(absl::MakeSpan(out));
  return out;
}

namespace {

class LocalitySelector final : public Selector {
 public:
  struct Zone {
    std::string region;
    std::string zone;
    std::vector<uint32_t> members;
    std::unique_ptr<const Selector> child;
  };

  LocalitySelector(std::vector<Zone> zones, std::vector<double> cumulative,
                   std::vector<uint32_t> order)
      : zones_(std::move(zones)),
        cumulative_(std::move(cumulative)),
        order_(std::move(order)) {}

  size_t Pick(const PickRequest& request,
              absl::Span<uint32_t> out) const noexcept override {
    const size_t n = zones_.size();
    if (n == 0 || out.empty()) {
      return 0;
    }
    size_t row = n;  // the caller's zone is unknown
    if (request.caller != nullptr) {
      for (size_t z = 0; z < n; ++z) {
        if (zones_[z].zone == request.caller->zone &&
            zones_[z].region == request.caller->region) {
          row = z;
          break;
        }
      }
    }
    const double* cum = cumulative_.data() + row * n;
    const uint32_t* order = order_.data() + row * n;
    size_t chosen = order[0];
    const double total = cum[n - 1];
    if (total > 0) {
      const double r = pick_internal::RngOf(request).NextDouble() * total;
      for (size_t z = 0; z < n; ++z) {
        if (r < cum[z]) {
          chosen = z;
          break;
        }
      }
    }
    size_t count = zones_[chosen].child->Pick(request, out);
    for (size_t k = 0; k < n && count < out.size(); ++k) {
      if (order[k] != chosen) {
        count += zones_[order[k]].child->Pick(request, out.subspan(count));
      }
    }
    return count;
  }

  // The child of the zone with this region and zone, or null.
  const Selector* ChildOf(const std::string& region,
                          const std::string& zone) const {
    for (const Zone& z : zones_) {
      if (z.region == region && z.zone == zone) {
        return z.child.get();
      }
    }
    return nullptr;
  }

 private:
  std::vector<Zone> zones_;
  // Row r (caller in zone r; row n: unknown caller): cumulative shares over
  // the zones, and the zones by decreasing share.
  std::vector<double> cumulative_;
  std::vector<uint32_t> order_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<const Selector>> BuildLocalitySelector(
    const SelectorInput& input, const PolicyConfig& config) {
  const Table& table = *input.table;
  std::map<std::pair<std::string, std::string>, std::vector<uint32_t>> groups;
  for (uint32_t index : input.members) {
    const Locality& l = table.member(index).backend.locality;
    groups[{l.region, l.zone}].push_back(index);
  }
  const auto* prev = dynamic_cast<const LocalitySelector*>(input.previous);
  std::vector<LocalitySelector::Zone> zones;
  std::vector<ZoneWeight> weights;
  zones.reserve(groups.size());
  for (auto& [key, members] : groups) {
    LocalitySelector::Zone z;
    z.region = key.first;
    z.zone = key.second;
    z.members = std::move(members);
    SelectorInput child;
    child.table = &table;
    child.members = z.members;
    child.previous =
        prev != nullptr ? prev->ChildOf(z.region, z.zone) : nullptr;
    auto built = BuildSelector(config.child_or_default(), child);
    if (!built.ok()) {
      return built.status();
    }
    z.child = *std::move(built);

    uint32_t eligible = 0;
    for (uint32_t index : z.members) {
      eligible += table.eligible(index) ? 1 : 0;
    }
    ZoneWeight w;
    w.host_count = eligible;
    w.utilization = -1;
    w.weight = eligible;
    for (const ZoneWeight& published : table.zone_weights()) {
      if (published.locality.region == z.region &&
          published.locality.zone == z.zone) {
        w = published;
        break;
      }
    }
    if (eligible == 0) {
      w.weight = 0;
      w.host_count = 0;
    }
    weights.push_back(w);
    zones.push_back(std::move(z));
  }
  const size_t n = zones.size();
  std::vector<double> cumulative((n + 1) * n);
  std::vector<uint32_t> order((n + 1) * n);
  std::vector<double> shares(n);
  for (size_t row = 0; row <= n; ++row) {
    CallerZoneShares(weights, row == n ? -1 : static_cast<int>(row),
                     config.locality, absl::MakeSpan(shares));
    double sum = 0;
    for (size_t z = 0; z < n; ++z) {
      sum += std::max(0.0, shares[z]);
      cumulative[row * n + z] = sum;
    }
    uint32_t* o = order.data() + row * n;
    std::iota(o, o + n, 0u);
    std::stable_sort(o, o + n, [&](uint32_t a, uint32_t b) {
      return shares[a] > shares[b];
    });
  }
  return std::unique_ptr<const Selector>(std::make_unique<LocalitySelector>(
      std::move(zones), std::move(cumulative), std::move(order)));
}

}  // namespace aside
