// An in-process aside.v1.LoadBalancer for stub tests: Watch streams whatever
// the test pushes, ReportLoad records the reports. Lets tests craft updates
// (bad tables, swaps at a high rate) that the real server never sends.
#ifndef ASIDE_TESTS_CLIENT_FAKE_LOOKASIDE_H_
#define ASIDE_TESTS_CLIENT_FAKE_LOOKASIDE_H_

#include <grpcpp/grpcpp.h>

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "aside/v1/lookaside.grpc.pb.h"
#include "lib/sync.h"

namespace aside::testing {

class FakeLookaside final : public v1::LoadBalancer::Service {
 public:
  // Queues an update for every open and future Watch stream that subscribed
  // to its group (future streams get the whole history, in order).
  void Push(const v1::GroupUpdate& update) {
    aside::MutexLock lock(&mu_);
    history_.push_back(update);
  }

  int watch_calls() const {
    aside::MutexLock lock(&mu_);
    return watch_calls_;
  }
  // The distinct peers (client address and port: one per connection) that
  // opened Watch streams.
  std::set<std::string> watch_peers() const {
    aside::MutexLock lock(&mu_);
    return watch_peers_;
  }
  std::vector<v1::LoadReport> reports() const {
    aside::MutexLock lock(&mu_);
    return reports_;
  }
  // Waits (bounded) until a report received so far or later satisfies
  // `match`; returns the latest such report, or nothing on timeout.
  std::optional<v1::LoadReport> AwaitReport(
      const std::function<bool(const v1::LoadReport&)>& match,
      absl::Duration timeout = absl::Seconds(10)) const {
    aside::MutexLock lock(&mu_);
    std::optional<v1::LoadReport> found;
    mu_.AwaitWithTimeout(
        [&] {
          for (auto it = reports_.rbegin(); it != reports_.rend(); ++it) {
            if (match(*it)) {
              found = *it;
              return true;
            }
          }
          return false;
        },
        timeout);
    return found;
  }
  void set_report_status(grpc::Status s) {
    aside::MutexLock lock(&mu_);
    report_status_ = std::move(s);
  }
  void Stop() {
    aside::MutexLock lock(&mu_);
    stopped_ = true;
  }

  grpc::Status Watch(grpc::ServerContext* context,
                     const v1::WatchRequest* request,
                     grpc::ServerWriter<v1::GroupUpdate>* writer) override {
    size_t next = 0;
    {
      aside::MutexLock lock(&mu_);
      ++watch_calls_;
      watch_peers_.insert(context->peer());
    }
    while (!context->IsCancelled()) {
      std::vector<v1::GroupUpdate> batch;
      {
        aside::MutexLock lock(&mu_);
        auto ready = [&] { return next < history_.size() || stopped_; };
        mu_.AwaitWithTimeout(aside::Cond(&ready), absl::Milliseconds(20));
        if (stopped_) {
          return grpc::Status(grpc::StatusCode::UNAVAILABLE, "stopped");
        }
        for (; next < history_.size(); ++next) {
          for (const std::string& g : request->groups()) {
            if (g == history_[next].group()) {
              batch.push_back(history_[next]);
            }
          }
        }
      }
      for (const v1::GroupUpdate& u : batch) {
        if (!writer->Write(u)) {
          return grpc::Status::CANCELLED;
        }
      }
    }
    return grpc::Status::CANCELLED;
  }

  grpc::Status ReportLoad(grpc::ServerContext*,
                          grpc::ServerReader<v1::LoadReport>* reader,
                          v1::ReportLoadResponse* response) override {
    {
      aside::MutexLock lock(&mu_);
      if (!report_status_.ok()) {
        return report_status_;
      }
    }
    v1::LoadReport report;
    while (reader->Read(&report)) {
      aside::MutexLock lock(&mu_);
      response->set_accepted(response->accepted() +
                             static_cast<uint64_t>(report.loads_size()));
      reports_.push_back(report);
    }
    return grpc::Status::OK;
  }

 private:
  mutable aside::Mutex mu_;
  std::deque<v1::GroupUpdate> history_;
  std::vector<v1::LoadReport> reports_;
  grpc::Status report_status_;
  int watch_calls_ = 0;
  std::set<std::string> watch_peers_;
  bool stopped_ = false;
};

// The fake served on 127.0.0.1:<free port>.
struct FakeServer {
  FakeLookaside service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::string target() const { return "127.0.0.1:" + std::to_string(port); }

  void Start() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
  }
  ~FakeServer() {
    if (server) {
      service.Stop();
      server->Shutdown(std::chrono::system_clock::now() +
                       std::chrono::seconds(1));
    }
  }
};

}  // namespace aside::testing

#endif  // ASIDE_TESTS_CLIENT_FAKE_LOOKASIDE_H_
