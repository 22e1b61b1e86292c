#include "core/mapped_read.hpp"

#include <csetjmp>
#include <csignal>
#include <cstring>
#include <mutex>

namespace amk {
namespace {

thread_local sigjmp_buf* t_jump = nullptr;  // the guarded call running on this thread, if any
struct sigaction g_previous {};
std::once_flag g_installed;

void on_sigbus(int sig, siginfo_t* info, void* ucontext) {
  if (t_jump != nullptr) siglongjmp(*t_jump, 1);
  // Not a guarded read: the handler that was there before, or the default action.
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, info, ucontext);
    return;
  }
  if ((g_previous.sa_flags & SA_SIGINFO) == 0 && g_previous.sa_handler != SIG_DFL &&
      g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
    return;
  }
  std::signal(SIGBUS, SIG_DFL);
  std::raise(SIGBUS);
}

void install() {
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  (void)sigaction(SIGBUS, &sa, &g_previous);
}

struct Copy {
  void* dst;
  const void* src;
  size_t bytes;
};

}  // namespace

bool run_guarded(void (*fn)(void*), void* context) noexcept {
  std::call_once(g_installed, install);
  sigjmp_buf jump;
  sigjmp_buf* const outer = t_jump;
  if (sigsetjmp(jump, 1) != 0) {
    t_jump = outer;
    return false;
  }
  t_jump = &jump;
  fn(context);
  t_jump = outer;
  return true;
}

bool copy_mapped(void* dst, const void* src, size_t bytes) noexcept {
  if (bytes == 0) return true;
  Copy c{dst, src, bytes};
  return run_guarded(
      [](void* p) {
        const Copy& c = *static_cast<const Copy*>(p);
        std::memcpy(c.dst, c.src, c.bytes);
      },
      &c);
}

}  // namespace amk
