#include "tests/fuzz/stream_fuzz_server.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "lib/clock.h"
#include "server/api/grpclb_service.h"
#include "server/api/load_balancer_service.h"
#include "server/api/watch.h"
#include "server/api/xds/ads_service.h"
#include "server/base/metrics.h"
#include "server/groups/group_registry.h"
#include "server/load/load_aggregator.h"

namespace aside::fuzz {
namespace {

using aside::Backend;
using server::GroupSpec;

struct Services {
  server::Metrics metrics;
  std::unique_ptr<server::GroupRegistry> groups;
  std::unique_ptr<server::LoadAggregator> loads;
  std::unique_ptr<server::xds::AdsService> ads;
  std::unique_ptr<server::GrpclbService> grpclb;
  std::unique_ptr<server::WatchHub> watch;
  std::unique_ptr<server::LoadBalancerService> lb;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

Services* Start() {
  // Kept for the life of the process (reachable: no leak report).
  auto* s = new Services;
  absl::StatusOr<std::unique_ptr<server::GroupRegistry>> groups =
      server::GroupRegistry::Create(&s->metrics, 1, 100);
  if (!groups.ok()) {
    std::abort();
  }
  s->groups = *std::move(groups);
  GroupSpec spec;
  spec.name = "web";
  spec.aliases = {"web.example.internal"};
  spec.policy.kind = PolicyKind::kWeightedRoundRobin;
  spec.health_check.kind = server::HealthCheckSpec::Kind::kNone;
  for (int i = 1; i <= 3; ++i) {
    Backend b;
    b.address = absl::StrCat("10.0.0.", i, ":80");
    b.weight = 100 * i;
    spec.backends.push_back(b);
  }
  if (!s->groups->Add(spec).ok()) {
    std::abort();
  }
  server::GroupRegistry* registry = s->groups.get();
  s->loads = std::make_unique<server::LoadAggregator>(
      &SystemClock::Get(), absl::Seconds(10),
      [registry](const std::string& group, const std::string& address) {
        server::GroupPtr g = registry->Find(group);
        return g != nullptr && g->table()->Find(address) >= 0;
      });
  s->ads = std::make_unique<server::xds::AdsService>(registry, &s->metrics,
                                                     s->loads.get());
  s->grpclb = std::make_unique<server::GrpclbService>(
      registry, s->loads.get(), &s->metrics, absl::Seconds(1), 100);
  s->watch = std::make_unique<server::WatchHub>(registry, &s->metrics,
                                                absl::Seconds(5));
  s->lb = std::make_unique<server::LoadBalancerService>(
      registry, &s->metrics, &SystemClock::Get(), s->loads.get());
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &s->port);
  builder.RegisterService(s->ads.get());
  builder.RegisterService(s->grpclb.get());
  builder.RegisterService(s->lb.get());
  s->watch->AddCompletionQueues(builder);
  s->server = builder.BuildAndStart();
  if (s->server == nullptr || s->port == 0) {
    std::abort();
  }
  s->watch->Serve(s->lb->WatchRequester());
  return s;
}

}  // namespace

std::shared_ptr<grpc::Channel> StreamFuzzChannel() {
  static Services* services = Start();
  static std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", services->port),
                          grpc::InsecureChannelCredentials());
  return channel;
}

std::vector<std::string> SplitMessages(const uint8_t* data, size_t size,
                                       size_t max) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (out.size() < max && pos < size) {
    uint64_t length = 0;
    for (int shift = 0; pos < size && shift < 35; shift += 7) {
      const uint8_t b = data[pos++];
      length |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) {
        break;
      }
    }
    const size_t n = std::min<uint64_t>(length, size - pos);
    out.emplace_back(reinterpret_cast<const char*>(data + pos), n);
    pos += n;
  }
  return out;
}

std::unique_ptr<grpc::ClientContext> FuzzContext() {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return c;
}

}  // namespace aside::fuzz
