// Default sanitizer options for the project's binaries in sanitizer builds
// (ctest cannot pass several environment variables through
// gtest_discover_tests). Environment variables still override these.
extern "C" {

const char* __asan_default_options() {
  return "detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1";
}

const char* __lsan_default_options() {
  return "suppressions=" ASIDE_SUPPRESSIONS_DIR "/lsan.supp";
}

const char* __ubsan_default_options() {
  return "halt_on_error=1:print_stacktrace=1";
}

// suppress_equal_addresses=0: a message that gRPC (not instrumented) hands
// from one thread to another shows TSan thousands of suppressed races when
// it is freed, one per field, and TSan's check for an address it reported
// before is linear in every address reported before: a 5000-backend group
// took WatchSlowReaderTest minutes of that check and never finished. The
// suppressions still apply; only the address-based de-duplication of the
// reports is off (reports are still de-duplicated by stack).
const char* __tsan_default_options() {
  return "halt_on_error=1:second_deadlock_stack=1:report_signal_unsafe=0:"
         "suppress_equal_addresses=0:"
         "suppressions=" ASIDE_SUPPRESSIONS_DIR "/tsan.supp";
}

}  // extern "C"
