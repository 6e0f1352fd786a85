// redmutex.hpp beyond the basics: Guard::release() ending a watchdog's wait, adopting a C
// handle, and the lock options the C API has (interrupt, wait cap, retry delay, hand-off
// window, min_replicas, TLS CA), each shown to reach the library.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>

#include <unistd.h>

#include "redmutex.hpp"
#include "testing.h"
#include "support.hpp"

using namespace std::chrono_literals;

// Makes the `fail_in`-th operator new from now throw std::bad_alloc (0: none does), to show
// what on_lost leaves behind when an allocation fails.
static std::atomic<int> fail_in{0};

void* operator new(std::size_t size) {
  if (fail_in > 0 && --fail_in == 0) throw std::bad_alloc();
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

template <typename F>
static redmutex_result code_of(F&& f) {
  try {
    f();
  } catch (const redmutex::Error& e) {
    return e.code();
  }
  return REDMUTEX_RESULT_OK;
}

static void test_release_ends_a_watchdog_wait() {
  redmutex::Client client = test_client();
  std::string name = unique_name("watchdog");
  redmutex::Guard guard = client.lock(name, 30s);
  std::atomic<int> state{0};  // 0 waiting to start, 1 waiting, 2 not lost, 3 lost
  std::thread watchdog([&] {
    state = 1;
    state = guard.wait_lost(60s) ? 3 : 2;
  });
  while (state == 0) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(50ms);
  auto start = std::chrono::steady_clock::now();
  guard.release();
  watchdog.join();
  CHECK(state == 2);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  CHECK(guard);  // the handle is kept
  CHECK(!guard.is_held());
  CHECK(!client.is_locked(name));
  CHECK(code_of([&] { guard.release(); }) == REDMUTEX_RESULT_NOT_HELD);
}

static void test_guard_adopts_a_c_handle() {
  redmutex::Client client = test_client();
  std::string name = unique_name("adopt");
  redmutex_guard* raw = nullptr;
  CHECK(redmutex_lock(client.native_handle(), name.c_str(), 30000, 0, &raw) == REDMUTEX_RESULT_OK);
  {
    redmutex::Guard guard(raw);
    CHECK(guard.native_handle() == raw);
    CHECK(guard.is_held());
  }
  CHECK(!client.is_locked(name));  // the Guard's destructor released and freed it
}

static void test_interrupt_stops_a_wait() {
  redmutex::Client client = test_client();
  std::string name = unique_name("interrupt");
  redmutex::Guard holder = client.lock(name, 30s);
  redmutex::LockOptions options;
  options.wait_cap = 20ms;
  std::atomic<int> asked{0};
  options.interrupt = [&] { return ++asked >= 3; };
  auto start = std::chrono::steady_clock::now();
  CHECK(code_of([&] { (void)client.lock(name, options); }) == REDMUTEX_RESULT_INTERRUPTED);
  CHECK(asked >= 3);
  CHECK(std::chrono::steady_clock::now() - start < 5s);

  // An exception from the check stops the wait and comes out of the lock call.
  options.interrupt = [] () -> bool { throw std::runtime_error("shutting down"); };
  bool rethrown = false;
  try {
    (void)client.lock(name, options);
  } catch (const std::runtime_error& e) {
    rethrown = std::string(e.what()) == "shutting down";
  }
  CHECK(rethrown);
  CHECK(holder.is_held());
}

// A wait with a 10 s cap ends when its interrupt descriptor becomes readable, and the
// interrupt check then stops it: long before the cap.
static void test_interrupt_fd_ends_a_wait_at_once() {
  redmutex::Client client = test_client();
  std::string name = unique_name("interrupt-fd");
  redmutex::Guard holder = client.lock(name, 30s);
  int fds[2];
  CHECK(pipe(fds) == 0);
  std::atomic<bool> poked{false};
  redmutex::LockOptions options;
  options.wait_cap = 10s;
  options.interrupt_fd = fds[0];
  options.interrupt = [&] { return poked.load(); };
  std::thread poker([&] {
    std::this_thread::sleep_for(100ms);
    poked = true;
    CHECK(write(fds[1], "!", 1) == 1);
  });
  auto start = std::chrono::steady_clock::now();
  CHECK(code_of([&] { (void)client.lock(name, options); }) == REDMUTEX_RESULT_INTERRUPTED);
  poker.join();
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  CHECK(holder.is_held());
  close(fds[0]);
  close(fds[1]);
}

static void test_lock_options_reach_the_library() {
  redmutex::Client client = test_client();
  std::string name = unique_name("options");
  redmutex::LockOptions options;
  options.retry_delay = 0ms;  // out of range: the library must have seen it
  CHECK(code_of([&] { (void)client.try_lock(name, options); }) ==
        REDMUTEX_RESULT_INVALID_ARGUMENT);
  options = {};
  options.wait_cap = 0ms;
  CHECK(code_of([&] { (void)client.try_lock(name, options); }) ==
        REDMUTEX_RESULT_INVALID_ARGUMENT);
  options = {};
  options.handoff_window = 60001ms;
  CHECK(code_of([&] { (void)client.try_lock(name, options); }) ==
        REDMUTEX_RESULT_INVALID_ARGUMENT);
  options = {};
  options.min_replicas = redmutex::MinReplicas{1, 0ms};  // a timeout of 0 is out of range
  CHECK(code_of([&] { (void)client.try_lock(name, options); }) ==
        REDMUTEX_RESULT_INVALID_ARGUMENT);
  // Valid values take the lock.
  options = {};
  options.retry_delay = 10ms;
  options.wait_cap = 50ms;
  options.handoff_window = 0ms;
  std::optional<redmutex::Guard> guard = client.try_lock(name, options);
  CHECK(guard && guard->is_held());
}

static void test_tls_ca_option_reaches_the_library() {
  redmutex::ClientOptions options;
  options.tls_ca_cert = "not a certificate";
  CHECK(code_of([&] { redmutex::Client client("rediss://127.0.0.1:1", options); }) ==
        REDMUTEX_RESULT_INVALID_ARGUMENT);
}

// Whether this operator new is the one in use (valgrind puts its own in its place).
static bool allocation_failures_work() {
  fail_in = 1;
  try {
    delete new int(0);
  } catch (const std::bad_alloc&) {
    return true;
  }
  fail_in = 0;
  return false;
}

static void test_on_lost_that_throws_registers_nothing() {
  if (!allocation_failures_work()) {
    printf("skipped: operator new is replaced here (valgrind); the sanitizer runs check this\n");
    return;
  }
  redmutex::Client client = test_client();
  std::string name = unique_name("on-lost-alloc");
  redmutex::LockOptions options;
  options.ttl = 200ms;
  options.auto_renew = false;
  redmutex::Guard guard = client.lock(name, options);
  std::atomic<int> calls{0};
  guard.on_lost([&] { ++calls; });  // the vector of callbacks is now full
  // The second allocation inside on_lost fails: the one that makes room for the callback.
  bool threw = false;
  fail_in = 2;
  try {
    guard.on_lost([&] { calls += 100; });
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  fail_in = 0;
  CHECK(threw);
  // Had the failed callback been registered, the loss would call it through freed memory.
  CHECK(guard.wait_lost(5s));
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (calls == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  CHECK(calls == 1);
}

int main() {
  alarm(120);  // a deadlock fails the program instead of hanging the suite
  RUN(test_release_ends_a_watchdog_wait);
  RUN(test_guard_adopts_a_c_handle);
  RUN(test_interrupt_stops_a_wait);
  RUN(test_interrupt_fd_ends_a_wait_at_once);
  RUN(test_lock_options_reach_the_library);
  RUN(test_tls_ca_option_reaches_the_library);
  RUN(test_on_lost_that_throws_registers_nothing);
  return TESTING_SUMMARY();
}
