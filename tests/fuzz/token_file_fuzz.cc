// The admin token file ("TOKEN ROLE" lines), read by AdminAuth::Create from
// a file as the server does.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "server/auth/admin_auth.h"

namespace {

const std::string& TokenFile() {
  static const std::string* path = [] {
    const char* dir = std::getenv("TMPDIR");
    std::string tmpl =
        std::string(dir != nullptr ? dir : "/tmp") + "/aside-token-fuzz-XXXXXX";
    const int fd = mkstemp(tmpl.data());
    if (fd < 0) {
      std::abort();
    }
    close(fd);
    static std::string kept = tmpl;
    std::atexit([] { unlink(kept.c_str()); });
    return new std::string(tmpl);
  }();
  return *path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    std::ofstream out(TokenFile(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data),
              static_cast<std::streamsize>(size));
  }
  auto auth = aside::server::AdminAuth::Create(TokenFile(), {});
  if (auth.ok()) {
    (void)(*auth)->RoleOfToken("0123456789abcdef");
  }
  return 0;
}
