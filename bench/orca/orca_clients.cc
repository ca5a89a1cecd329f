// What gRPC's own weighted_round_robin costs the backends (gRFC A58): N
// clients, each with its own channel to each of M backends and one
// out-of-band ORCA stream on it, N × M streams in all, as N stock clients
// with ORCA-weighted round robin hold them. bench/orca/orca_cost.py sets
// this against one aside-server holding M streams for the same backends.
//
//   orca_clients --clients N --interval 1s --seconds S ADDRESS...
//
// Opens every stream, counts the reports that arrive for S seconds, then
// prints one line: "streams=... reports=... failed=..." and exits.
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/client_callback.h>

#include <atomic>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "lib/command_line.h"
#include "xds/service/orca/v3/orca.grpc.pb.h"

ABSL_FLAG(int, clients, 100, "clients, each with a channel to every backend");
ABSL_FLAG(absl::Duration, interval, absl::Seconds(1), "report interval asked");
ABSL_FLAG(absl::Duration, seconds, absl::Seconds(20), "how long to listen");

namespace {

using xds::data::orca::v3::OrcaLoadReport;

std::atomic<uint64_t> reports{0};
std::atomic<uint64_t> failed{0};
std::atomic<uint64_t> done{0};

class Stream : public grpc::ClientReadReactor<OrcaLoadReport> {
 public:
  Stream(const std::string& address, int client, absl::Duration interval) {
    grpc::ChannelArguments args;
    // A channel of its own per client, as separate client processes have.
    args.SetInt("aside.bench.client", client);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channel_ = grpc::CreateCustomChannel(
        "ipv4:" + address, grpc::InsecureChannelCredentials(), args);
    stub_ = xds::service::orca::v3::OpenRcaService::NewStub(channel_);
    const int64_t nanos = absl::ToInt64Nanoseconds(interval);
    request_.mutable_report_interval()->set_seconds(nanos / 1'000'000'000);
    request_.mutable_report_interval()->set_nanos(
        static_cast<int32_t>(nanos % 1'000'000'000));
    stub_->async()->StreamCoreMetrics(&context_, &request_, this);
    StartRead(&report_);
    StartCall();
  }
  void Cancel() { context_.TryCancel(); }
  void OnReadDone(bool ok) override {
    if (ok) {
      reports.fetch_add(1, std::memory_order_relaxed);
      StartRead(&report_);
    }
  }
  void OnDone(const grpc::Status& status) override {
    if (!status.ok() && status.error_code() != grpc::StatusCode::CANCELLED) {
      failed.fetch_add(1, std::memory_order_relaxed);
    }
    done.fetch_add(1, std::memory_order_relaxed);
  }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<xds::service::orca::v3::OpenRcaService::Stub> stub_;
  grpc::ClientContext context_;
  xds::service::orca::v3::OrcaLoadReportRequest request_;
  OrcaLoadReport report_;
};

}  // namespace

constexpr char kUsage[] =
    "usage: orca_clients [--clients N] [--interval D] [--seconds D] "
    "ADDRESS...\n";

int main(int argc, char** argv) {
  absl::StatusOr<std::vector<std::string>> addresses = aside::ParseCommandLine(
      argc, argv, {.usage = kUsage, .positional = true});
  if (!addresses.ok() || addresses->empty()) {
    std::cerr << "orca_clients: "
              << (addresses.ok() ? "no backend" : addresses.status().message())
              << "\n"
              << kUsage;
    return 2;
  }
  std::vector<std::unique_ptr<Stream>> streams;
  for (int c = 0; c < absl::GetFlag(FLAGS_clients); ++c) {
    for (const std::string& a : *addresses) {
      streams.push_back(
          std::make_unique<Stream>(a, c, absl::GetFlag(FLAGS_interval)));
    }
  }
  std::cerr << "event=streams.open streams=" << streams.size() << std::endl;
  absl::SleepFor(absl::GetFlag(FLAGS_seconds));
  for (auto& s : streams) {
    s->Cancel();
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (done.load() < streams.size() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  std::cout << "streams=" << streams.size() << " reports=" << reports.load()
            << " failed=" << failed.load() << std::endl;
  // The streams' channels go with the process.
  for (auto& s : streams) {
    s.release();
  }
  return 0;
}
