// The per-call ORCA trailer parser (lib/load/orca_report.h) against
// protobuf's own parser of the same message: whatever the hand-written
// reader accepts, protobuf parses too, to the same values.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "lib/load/orca_report.h"
#include "xds/data/orca/v3/orca_load_report.pb.h"

namespace {

bool Same(double a, double b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::optional<aside::OrcaLoad> load = aside::ParseOrcaLoadReport(bytes);
  if (!load) {
    return 0;
  }
  xds::data::orca::v3::OrcaLoadReport report;
  if (!report.ParseFromArray(data, static_cast<int>(size)) ||
      !Same(load->cpu_utilization, report.cpu_utilization()) ||
      !Same(load->application_utilization, report.application_utilization()) ||
      !Same(load->qps, report.rps_fractional()) ||
      !Same(load->eps, report.eps())) {
    __builtin_trap();
  }
  return 0;
}
