// Names the calling thread, as `top -H`, `ps -L -o comm`, /proc/<pid>/task/
// <tid>/comm and debuggers show it.
//
// Every thread the server starts calls it first thing, with a name from the
// table in docs/operations.md ("Threads"); a thread that does not inherits
// the name of the thread that started it, which hides what it is. Linux
// keeps 15 bytes of a name, so names are at most 15 bytes (a longer one is
// cut, and would not match its row). Costs one system
// call; failures (other platforms) are ignored, a name is only a label.
#ifndef ASIDE_LIB_THREAD_NAME_H_
#define ASIDE_LIB_THREAD_NAME_H_

#include <pthread.h>

#include <algorithm>
#include <cstring>

namespace aside {

inline void NameThisThread(const char* name) {
  char cut[16] = {};
  std::memcpy(cut, name, std::min(std::strlen(name), sizeof(cut) - 1));
  (void)pthread_setname_np(pthread_self(), cut);
}

}  // namespace aside

#endif  // ASIDE_LIB_THREAD_NAME_H_
