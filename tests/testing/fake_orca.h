// A backend's out-of-band ORCA service for tests (what a stock gRPC server
// with a ServerMetricRecorder serves): reports set by the test, sent every
// interval each stream asks for, streams counted as they open.
#ifndef ASIDE_TESTS_TESTING_FAKE_ORCA_H_
#define ASIDE_TESTS_TESTING_FAKE_ORCA_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "xds/service/orca/v3/orca.grpc.pb.h"

namespace aside::testing {

using xds::data::orca::v3::OrcaLoadReport;
using xds::service::orca::v3::OrcaLoadReportRequest;

// A backend's ORCA service: sends `report` on each stream every interval
// the stream asked for (and `burst` more at once, to flood), until the
// stream is cancelled or the backend stops. Counts streams as they open.
class FakeOrca final : public xds::service::orca::v3::OpenRcaService::Service {
 public:
  grpc::Status StreamCoreMetrics(
      grpc::ServerContext* context, const OrcaLoadReportRequest* request,
      grpc::ServerWriter<OrcaLoadReport>* writer) override {
    const auto interval =
        std::chrono::seconds(request->report_interval().seconds()) +
        std::chrono::nanoseconds(request->report_interval().nanos());
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++streams_;
      ++open_;
      last_interval_ = interval;
    }
    changed_.notify_all();
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_ && !context->IsCancelled()) {
      const OrcaLoadReport report = report_;
      const int burst = burst_;
      lock.unlock();
      for (int i = 0; i <= burst; ++i) {
        if (!writer->Write(report)) {
          break;
        }
      }
      lock.lock();
      changed_.wait_for(lock, interval, [&] { return stopping_; });
    }
    --open_;
    changed_.notify_all();
    return grpc::Status::OK;
  }

  void Set(const OrcaLoadReport& report, int burst = 0) {
    std::lock_guard<std::mutex> lock(mu_);
    report_ = report;
    burst_ = burst;
  }
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    changed_.notify_all();
  }
  // Streams open now.
  int open() {
    std::lock_guard<std::mutex> lock(mu_);
    return open_;
  }
  // Streams opened in all.
  int streams() {
    std::lock_guard<std::mutex> lock(mu_);
    return streams_;
  }
  // Waits until `n` streams were opened in all.
  bool AwaitStreams(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, std::chrono::seconds(10),
                             [&] { return streams_ >= n; });
  }
  // Waits until `open` streams are open now.
  bool AwaitOpen(int open) {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, std::chrono::seconds(10),
                             [&] { return open_ == open; });
  }
  std::chrono::nanoseconds last_interval() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_interval_;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  OrcaLoadReport report_;
  int burst_ = 0;
  int streams_ = 0;
  int open_ = 0;
  bool stopping_ = false;
  std::chrono::nanoseconds last_interval_{0};
};

// A gRPC server on loopback, with the ORCA service or without it.
class OrcaBackend {
 public:
  explicit OrcaBackend(bool with_orca = true) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    if (with_orca) {
      builder.RegisterService(&orca_);
    } else {
      builder.RegisterService(&other_);
    }
    server_ = builder.BuildAndStart();
  }
  ~OrcaBackend() { Shutdown(); }
  void Shutdown() {
    if (server_ != nullptr) {
      orca_.Stop();
      server_->Shutdown(std::chrono::system_clock::now());
      server_.reset();
    }
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  FakeOrca& orca() { return orca_; }

 private:
  FakeOrca orca_;
  // Some other service (all of it unimplemented), so that the server serves.
  grpc::health::v1::Health::Service other_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

inline xds::data::orca::v3::OrcaLoadReport OrcaReport(double qps, double cpu,
                                                      double eps = 0) {
  xds::data::orca::v3::OrcaLoadReport r;
  r.set_rps_fractional(qps);
  r.set_cpu_utilization(cpu);
  r.set_eps(eps);
  return r;
}

}  // namespace aside::testing

#endif  // ASIDE_TESTS_TESTING_FAKE_ORCA_H_
