// The semaphore and the read-write lock through include/redmutex.hpp: the same RAII Guard as
// the mutex, the try_ forms' nullopt, and the errors.
#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

#include "redmutex.hpp"
#include "testing.h"
#include "support.hpp"

using namespace std::chrono_literals;

// The code of the redmutex::Error that `f` throws, or REDMUTEX_RESULT_OK if it throws none.
template <typename F>
static redmutex_result code_of(F&& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const redmutex::Error& e) {
    if (message != nullptr) *message = e.what();
    return e.code();
  }
  return REDMUTEX_RESULT_OK;
}

static void test_semaphore_admits_n_and_releases_by_scope() {
  redmutex::Client client = test_client();
  std::string name = unique_name("sem");
  {
    std::vector<redmutex::Guard> held;
    held.push_back(client.semaphore(name, 2));
    std::optional<redmutex::Guard> second = client.try_semaphore(name, 2, 10s);
    CHECK(second);
    CHECK(second->fence() > held[0].fence());
    CHECK(!client.try_semaphore(name, 2));
    CHECK(!client.try_semaphore_for(name, 2, 100ms));
    held.push_back(std::move(*second));
    // Another count for a held name is refused with both counts named.
    std::string why;
    CHECK(code_of([&] { (void)client.try_semaphore(name, 3); }, &why) ==
          REDMUTEX_RESULT_INVALID_ARGUMENT);
    CHECK(why.find("is held with 2 permits, but this call asked for 3") != std::string::npos);
    // A waiter gets the permit one holder gives back.
    std::thread releaser([&held] {
      std::this_thread::sleep_for(200ms);
      held[0].unlock();
    });
    std::optional<redmutex::Guard> waiter = client.try_semaphore_for(name, 2, 5s);
    releaser.join();
    CHECK(waiter && waiter->is_held());
  }
  // Every Guard went out of scope: both permits are free.
  redmutex::Guard a = client.semaphore(name, 2, 5s);
  redmutex::LockOptions options;
  options.ttl = 20s;
  redmutex::Guard b = client.semaphore(name, 2, options);
  CHECK(a.is_held() && b.is_held());
  CHECK(b.valid_for() <= 20s);
}

static void test_semaphore_bad_counts() {
  redmutex::Client client = test_client();
  std::string why;
  CHECK(code_of([&] { (void)client.semaphore(unique_name("zero"), 0); }, &why) ==
        REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK(why.find("a semaphore must have 1 to 1024 permits, got 0") != std::string::npos);
  CHECK(code_of([&] { (void)client.try_semaphore(unique_name("big"), 1025); }, &why) ==
        REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK(why.find("got 1025") != std::string::npos);
  CHECK(code_of([&] { (void)client.semaphore(std::string(513, 'n'), 2); }) ==
        REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK(code_of([&] { (void)client.read_lock(""); }) == REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK(code_of([&] { (void)client.write_lock(std::string(513, 'n')); }) ==
        REDMUTEX_RESULT_INVALID_ARGUMENT);
}

static void test_readers_share_writers_exclude() {
  redmutex::Client client = test_client();
  std::string name = unique_name("rw");
  {
    redmutex::Guard r1 = client.read_lock(name);
    std::optional<redmutex::Guard> r2 = client.try_read_lock(name);
    CHECK(r2 && r2->is_held());
    CHECK(!client.try_write_lock(name));
    CHECK(!client.try_write_lock_for(name, 100ms));
    CHECK(!client.try_lock(name));  // the mutex of the name is the write side
    CHECK(r1.fence() == 0);
  }
  std::uint64_t fence = 0;
  {
    std::optional<redmutex::Guard> w = client.try_write_lock_for(name, 5s);
    CHECK(w && w->fence() >= 1);
    fence = w->fence();
    CHECK(!client.try_read_lock(name));
    CHECK(!client.try_read_lock_for(name, 100ms));
    CHECK(client.is_locked(name));
    w->unlock();
    CHECK(!*w);
  }
  std::optional<redmutex::Guard> r = client.try_read_lock_for(name, 5s);
  CHECK(r && r->fence() == fence);
  r.reset();
  redmutex::Guard m = client.lock(name);
  CHECK(m.fence() > fence);
  CHECK(!client.try_read_lock(name));
}

static void test_guard_functions_on_read_and_write_holds() {
  redmutex::Client client = test_client();
  redmutex::LockOptions options;
  options.ttl = 300ms;
  options.auto_renew = false;
  std::string name = unique_name("rw-lost");
  CHECK(!client.is_locked(name));  // opens the connection before the short lease starts
  redmutex::Guard read = client.read_lock(name, options);
  std::atomic<int> calls{0};
  read.on_lost([&calls] { calls++; });
  CHECK(read.wait_lost(5s));
  for (int i = 0; i < 500 && calls.load() == 0; i++) std::this_thread::sleep_for(10ms);
  CHECK(calls.load() == 1);
  CHECK(code_of([&] { read.check(); }) == REDMUTEX_RESULT_LOST);
  CHECK(code_of([&] { read.unlock(); }) == REDMUTEX_RESULT_LOST);

  redmutex::Guard write = client.write_lock(name, 30s);
  CHECK(!write.token().empty());
  write.extend(60s);
  CHECK(write.valid_for() > 50s);
  CHECK(!write.wait_lost(10ms));
  write.release();
  CHECK(!write.is_held());
  CHECK(code_of([&] { write.release(); }) == REDMUTEX_RESULT_NOT_HELD);
}

int main() {
  RUN(test_semaphore_admits_n_and_releases_by_scope);
  RUN(test_semaphore_bad_counts);
  RUN(test_readers_share_writers_exclude);
  RUN(test_guard_functions_on_read_and_write_holds);
  return TESTING_SUMMARY();
}
