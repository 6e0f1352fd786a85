// Compiles include/redmutex.hpp as a C++17 user would, and checks the RAII release, the
// move-only Guard and the exceptions against a real redis-server.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "redmutex.hpp"
#include "testing.h"
#include "support.hpp"
#include "frozen.h"

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

static void test_version_matches_c_api() {
  std::string_view version = redmutex::version();
  CHECK(version == std::string_view(redmutex_version()));
  CHECK(version == EXPECTED_VERSION);
}

static void test_guard_releases_at_the_end_of_its_scope() {
  redmutex::Client client = test_client();
  redmutex::Client other = test_client();
  std::string name = unique_name("raii");
  {
    redmutex::Guard guard = client.lock(name, 30s);
    CHECK(guard);
    CHECK(guard.is_held());
    CHECK(guard.fence() >= 1);
    CHECK(client.is_locked(name));
    CHECK(!other.try_lock(name));
  }
  // Released by the destructor: another client gets it at once.
  CHECK(!client.is_locked(name));
  std::optional<redmutex::Guard> again = other.try_lock(name);
  CHECK(again.has_value());
  CHECK(again->is_held());
}

static void test_guard_is_move_only_and_moves_ownership() {
  redmutex::Client client = test_client();
  std::string first = unique_name("move-a");
  std::string second = unique_name("move-b");
  redmutex::Guard a = client.lock(first);
  redmutex::Guard b = std::move(a);
  CHECK(!a);
  CHECK(!a.is_held());
  CHECK(b.is_held());
  CHECK(client.is_locked(first));

  // Assigning over a Guard releases the lock it held.
  b = client.lock(second);
  CHECK(!client.is_locked(first));
  CHECK(client.is_locked(second));

  std::vector<redmutex::Guard> held;
  held.push_back(std::move(b));
  CHECK(held.back().is_held());
  held.clear();
  CHECK(!client.is_locked(second));
}

static void test_try_lock_for_waits_for_the_release() {
  redmutex::Client client = test_client();
  std::string name = unique_name("wait");
  std::optional<redmutex::Guard> holder = client.try_lock(name);
  CHECK(holder);
  CHECK(!client.try_lock_for(name, 100ms));
  std::thread releaser([&holder] {
    std::this_thread::sleep_for(200ms);
    holder->unlock();
  });
  std::optional<redmutex::Guard> waiter = client.try_lock_for(name, 5s);
  releaser.join();
  CHECK(waiter);
  CHECK(!*holder);
  waiter->unlock();
  CHECK(!*waiter);
}

static void test_errors_carry_the_result_code_and_message() {
  std::string message;
  CHECK(code_of([] { redmutex::Client client(std::vector<std::string>{}); }, &message) ==
        REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK(code_of([] { redmutex::Client client("http://not-redis"); }) ==
        REDMUTEX_RESULT_INVALID_ARGUMENT);
  redmutex::Client client = test_client();
  CHECK(code_of([&] { (void)client.lock(unique_name("ttl"), 0ms); }, &message) ==
        REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK(message.find("TTL") != std::string::npos);
  CHECK(code_of([&] { (void)client.lock(""); }) == REDMUTEX_RESULT_INVALID_ARGUMENT);

  redmutex::ClientOptions options;
  options.connect_timeout = 200ms;
  redmutex::Client down("redis://127.0.0.1:1", options);
  redmutex::Error error(REDMUTEX_RESULT_OK, "");
  try {
    (void)down.lock(unique_name("down"));
  } catch (const redmutex::Error& e) {
    error = e;
  }
  CHECK(error.code() == REDMUTEX_RESULT_CONNECTION);
  CHECK(std::strcmp(error.code_name(), "REDMUTEX_RESULT_CONNECTION") == 0);
  CHECK(std::string(error.what()).find("127.0.0.1:1") != std::string::npos);
}

static void test_unlock_reports_a_lost_lock_and_on_lost_runs() {
  redmutex::Client client = test_client();
  std::string name = unique_name("lost");
  redmutex::LockOptions options;
  options.ttl = 300ms;
  options.auto_renew = false;
  CHECK(!client.is_locked(name));  // opens the connection before the short lease starts
  std::optional<redmutex::Guard> guard = client.try_lock_for(name, 5s, options);
  CHECK(guard);
  std::atomic<int> calls{0};
  guard->on_lost([&calls] { calls++; });
  guard->on_lost([] { throw std::runtime_error("swallowed, never unwinds into C"); });
  CHECK(guard->wait_lost(5s));
  for (int i = 0; i < 500 && calls.load() == 0; i++) std::this_thread::sleep_for(10ms);
  CHECK(calls.load() == 1);
  std::string why;
  CHECK(code_of([&] { guard->check(); }, &why) == REDMUTEX_RESULT_LOST);
  CHECK(why == "lost: its TTL ran out (auto-renew is off)");
  CHECK(code_of([&] { guard->unlock(); }, &why) == REDMUTEX_RESULT_LOST);
  CHECK(why.find("lost before it was released: its TTL ran out") != std::string::npos);
  CHECK(!*guard);
}

static void test_token_and_owner_label() {
  redmutex::ClientOptions options = test_options();
  options.owner = "cpp-worker";
  redmutex::Client client(url(), options);
  redmutex::Guard guard = client.lock(unique_name("token"));
  std::string token = guard.token();
  CHECK(token.rfind("cpp-worker:", 0) == 0);
  CHECK(token.size() == std::strlen("cpp-worker:") + 32);
  CHECK(guard.valid_for() > 20s);
  guard.extend(60s);
  CHECK(guard.valid_for() > 50s);
}

static void test_servers_say_what_each_node_runs() {
  redmutex::Client client = test_client();
  CHECK(client.servers() == std::vector<std::string>{""});  // not connected to yet
  { redmutex::Guard guard = client.lock(unique_name("servers")); }
  std::vector<std::string> servers = client.servers();
  CHECK(servers.size() == 1);
  CHECK(servers[0].rfind("Redis ", 0) == 0 || servers[0].rfind("Valkey ", 0) == 0);
}

static void test_stats_count_grants_refusals_and_releases() {
  redmutex::Client client = test_client();
  std::string name = unique_name("stats");
  redmutex_stats s = client.stats();
  CHECK(s.size == sizeof s && s.acquired == 0 && s.held_now == 0);
  {
    std::optional<redmutex::Guard> guard = client.try_lock(name);
    CHECK(guard);
    CHECK(!client.try_lock(name));
    s = client.stats();
    CHECK(s.acquired == 1 && s.refused == 1 && s.held_now == 1);
  }
  s = client.stats();
  CHECK(s.held_now == 0 && s.held_seconds.count == 1 && s.lost == 0);
}

// A lock call whose one node refuses connections throws, and is counted as failed.
static void test_stats_count_a_failure() {
  char dead[64];
  int fd = closed_port(dead, sizeof dead);
  CHECK(fd >= 0);
  redmutex::Client client(dead, test_options());
  CHECK(code_of([&] { (void)client.lock(unique_name("stats-failed")); }) ==
        REDMUTEX_RESULT_CONNECTION);
  redmutex_stats s = client.stats();
  CHECK(s.failed == 1 && s.by_kind_mutex.failed == 1);
  CHECK(s.acquired == 0 && s.refused == 0 && s.timed_out == 0 && s.held_now == 0);
  close(fd);
}

// A mutex granted and refused, a read hold and a semaphore permit granted: each counted
// under its own kind, and the kinds add up to the totals.
static void test_stats_count_each_kind_apart() {
  redmutex::Client client = test_client();
  std::string name = unique_name("stats-kind");
  redmutex_stats s{};
  {
    std::optional<redmutex::Guard> mutex = client.try_lock(name + ":m");
    CHECK(mutex);
    CHECK(!client.try_lock(name + ":m"));
    std::optional<redmutex::Guard> read = client.try_read_lock(name + ":rw");
    std::optional<redmutex::Guard> permit = client.try_semaphore(name + ":s", 2);
    CHECK(read && permit);
    s = client.stats();
  }
  CHECK(s.by_kind_mutex.acquired == 1 && s.by_kind_mutex.refused == 1);
  CHECK(s.by_kind_read.acquired == 1 && s.by_kind_read.refused == 0);
  CHECK(s.by_kind_semaphore.acquired == 1 && s.by_kind_semaphore.refused == 0);
  CHECK(s.by_kind_mutex.acquired + s.by_kind_read.acquired + s.by_kind_semaphore.acquired ==
        s.acquired);
  CHECK(s.by_kind_mutex.refused + s.by_kind_read.refused + s.by_kind_semaphore.refused ==
        s.refused);
}

// A thread that waits for a held lock and gets it at the release received a hand-off; a
// 1 s lease held past a renewal has the renewal's lag measured.
static void test_stats_count_handoffs_and_renewal_lag() {
  redmutex::Client holder = test_client();
  redmutex::Client client = test_client();
  std::string name = unique_name("stats-handoff");
  std::optional<redmutex::Guard> held = holder.try_lock(name);
  CHECK(held);
  std::atomic<bool> granted{false};
  std::thread waiter([&] {
    try {
      std::optional<redmutex::Guard> guard = client.try_lock_for(name, 30s);
      granted = guard.has_value();
    } catch (const redmutex::Error& e) {
      std::fprintf(stderr, "the waiter failed: %s\n", e.what());
    }
  });
  // Until the waiter has announced itself in Redis (refused once, it waits for the release):
  // waiting_now counts a call from its start, before its first attempt.
  auto announced = [&] {
    std::vector<redmutex::ListedLock> locks = holder.list(name);
    return !locks.empty() && locks[0].waiters >= 1;
  };
  for (int i = 0; i < 1000 && !announced(); ++i) std::this_thread::sleep_for(10ms);
  bool waited = client.stats().waiting_now == 1 && announced();
  redmutex_result released = code_of([&] { held->unlock(); });
  waiter.join();
  CHECK(waited && released == REDMUTEX_RESULT_OK && granted);
  CHECK(client.stats().handoffs == 1);
  CHECK(holder.stats().handoffs == 0);

  CHECK(client.stats().renewal_lag_seconds.count == 0);
  {
    redmutex::Guard guard = client.lock(unique_name("stats-renewed"), 1000ms);
    for (int i = 0; i < 1000 && client.stats().renewals < 2; ++i) {
      std::this_thread::sleep_for(10ms);
    }
  }
  redmutex_stats s = client.stats();
  CHECK(s.renewals >= 2 && s.renewal_lag_seconds.count > 0);
  CHECK(s.renewal_lag_seconds.count == s.renewals + s.renewal_failures);
}

// No connection before the first call; after it, at least one to the node, and the
// struct's sum agrees with the per-node counts.
static void test_connections_are_counted_per_node() {
  redmutex::Client client = test_client();
  CHECK(client.connections() == std::vector<std::uint64_t>{0});
  CHECK(client.stats().connections_open == 0);
  CHECK(!client.is_locked(unique_name("stats-conns")));
  std::vector<std::uint64_t> counts = client.connections();
  CHECK(counts.size() == 1 && counts[0] >= 1);
  CHECK(client.stats().connections_open == counts[0]);
}

static void test_status_names_the_holder() {
  redmutex::Client client = test_client();
  std::string name = unique_name("status");
  redmutex::Status free_lock = client.status(name);
  CHECK(free_lock.holder.empty() && !free_lock.ttl && free_lock.fence == 0);
  {
    redmutex::Guard guard = client.lock(name);
    redmutex::Status held = client.status(name);
    CHECK(held.holder == guard.token());
    CHECK(held.ttl && *held.ttl > 25s && *held.ttl <= 30s);
    CHECK(held.fence == guard.fence());
  }
  CHECK(client.status(name).holder.empty());
}

// How many callers wait for `name`, as Client::list says (0 when it throws).
static std::uint64_t waiters_of(const redmutex::Client& client, const std::string& name) {
  try {
    std::vector<redmutex::ListedLock> locks = client.list(name);
    return locks.size() == 1 ? locks[0].waiters : 0;
  } catch (const redmutex::Error&) {
    return 0;
  }
}

// Client::list copies each lock with its holds; Client::force_unlock breaks a lock stuck with
// a 1 h lease (nothing renews it, as for a killed holder), its waiter gets it at once with a
// larger fence, and the stuck holder's release is refused. Bad input throws the C code.
static void test_list_and_force_unlock() {
  redmutex::Client client = test_client();
  redmutex::Client other = test_client();
  std::string name = unique_name("listed");
  redmutex::LockOptions hour;
  hour.ttl = 1h;
  hour.auto_renew = false;
  redmutex::Guard stuck = client.lock(name, hour);
  std::vector<redmutex::ListedLock> locks = client.list(name);
  CHECK(locks.size() == 1);
  CHECK(locks[0].name == name);
  CHECK(locks[0].holds.size() == 1);
  const redmutex::ListedHold& hold = locks[0].holds[0];
  CHECK(hold.kind == REDMUTEX_HOLD_KIND_EXCLUSIVE);
  CHECK(std::string_view(hold.kind_name()) == "exclusive");
  CHECK(hold.holder == stuck.token());
  CHECK(hold.ttl && *hold.ttl > 30min && *hold.ttl <= 1h);
  CHECK(hold.nodes == 1 && locks[0].nodes == 1 && !locks[0].disagree);
  CHECK(locks[0].fence == stuck.fence() && locks[0].waiters == 0);

  std::optional<redmutex::Guard> waiter;
  redmutex_result waited = REDMUTEX_RESULT_PANIC;
  std::thread thread([&] { waited = code_of([&] { waiter = other.try_lock_for(name, 60s); }); });
  for (int i = 0; i < 500 && waiters_of(client, name) == 0; ++i) {
    std::this_thread::sleep_for(20ms);
  }
  std::size_t removed = 0;
  redmutex_result broke = code_of([&] { removed = client.force_unlock(name); });
  thread.join();
  CHECK(broke == REDMUTEX_RESULT_OK && removed == 1);
  CHECK(waited == REDMUTEX_RESULT_OK && waiter);
  CHECK(waiter->fence() > stuck.fence());
  locks = client.list(name);
  CHECK(locks.size() == 1 && locks[0].holds.size() == 1);
  CHECK(locks[0].holds[0].holder == waiter->token());
  CHECK(code_of([&] { stuck.unlock(); }) == REDMUTEX_RESULT_LOST);
  waiter->unlock();
  CHECK(client.list(name).empty());
  CHECK(client.force_unlock(name) == 0);

  std::string message;
  CHECK(code_of([&] { (void)client.list(""); }, &message) == REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK(message.find("pattern") != std::string::npos);
  CHECK(code_of([&] { (void)client.force_unlock(""); }) == REDMUTEX_RESULT_INVALID_ARGUMENT);
}

// A round ends as soon as no majority can grant: two of three nodes fail at once (their fence
// counter holds no number) and the third, frozen with SIGSTOP, is not waited for. The
// exception's message names it so, and calls no node unreachable.
static void test_a_node_not_waited_for_is_named_so() {
  std::string five = testing_env("REDMUTEX_TEST_URLS5");
  std::vector<std::string> urls;
  for (std::size_t at = 0; urls.size() < 2;) {
    std::size_t comma = five.find(',', at);
    CHECK(comma != std::string::npos);
    urls.push_back(five.substr(at, comma - at));
    at = comma + 1;
  }
  urls.emplace_back(freezable_url());
  pid_t frozen = freezable_pid();
  CHECK(frozen > 1);
  std::string name = unique_name("not-waited-for");
  // A node timeout far above the round's real length: under valgrind, the first run of the
  // failure paths is slow enough that a 1 s deadline could pass before the two failures are
  // read (the frozen node would then be reported timed out rather than not waited for).
  redmutex::ClientOptions options = test_options();
  options.node_timeout = 5s;
  redmutex::Client client(urls, options);
  // Pooled connections to every node.
  CHECK(code_of([&] { client.lock(name, 10s).unlock(); }) == REDMUTEX_RESULT_OK);
  CHECK(break_fence(urls[0].c_str(), name.c_str()));
  CHECK(break_fence(urls[1].c_str(), name.c_str()));
  CHECK(kill(frozen, SIGSTOP) == 0);
  std::string message;
  redmutex_result got = code_of([&] { (void)client.try_lock(name, 10s); }, &message);
  kill(frozen, SIGCONT);
  if (message.find(urls[2] + ": not waited for") == std::string::npos) {
    std::fprintf(stderr, "the error said: %s\n", message.c_str());
  }
  CHECK(got == REDMUTEX_RESULT_NO_QUORUM);
  CHECK(message.find(urls[2] + ": not waited for") != std::string::npos);
  CHECK(message.find("unreachable") == std::string::npos);
}

// With interrupt_every_wait, the interrupt descriptor ends even a read of a reply: a round
// waiting for a frozen server ends once the descriptor is readable and `interrupt` says stop,
// well before its 5 s node timeout, and what its request stores when the server wakes is
// undone by the undo written behind it. The call could wait 10 s: it ends at the stop.
static void test_interrupt_every_wait_ends_a_read_from_a_frozen_server() {
  pid_t frozen = freezable_pid();
  CHECK(frozen > 1);
  redmutex::ClientOptions client_options = test_options();
  client_options.node_timeout = 5s;
  redmutex::Client client(freezable_url(), client_options);
  std::string name = unique_name("every-wait");
  std::uint64_t fence = 0;
  // A pooled connection, so that the round is written at once while the server is frozen.
  CHECK(code_of([&] {
          redmutex::Guard guard = client.lock(name, 30s);
          fence = guard.fence();
          guard.unlock();
        }) == REDMUTEX_RESULT_OK);
  int fds[2];
  CHECK(pipe(fds) == 0);
  // The read end does not block: `interrupt` drains it, and may run when it is empty.
  bool nonblocking = fcntl(fds[0], F_SETFL, O_NONBLOCK) == 0;
  std::atomic<bool> poked{false};
  std::atomic<int> asked{0};
  redmutex::LockOptions options;
  options.interrupt_fd = fds[0];
  options.interrupt_every_wait = true;
  options.interrupt = [&] {
    char buf[16];
    while (read(fds[0], buf, sizeof buf) > 0) {
    }
    ++asked;
    return poked.load();
  };
  // Everything runs before the next check, so that a failure still thaws the server and
  // closes the pipe (its write end only now: a closed write end leaves the pipe readable).
  redmutex_result got = REDMUTEX_RESULT_NULL_PARAMETER;
  std::string message;
  auto took = std::chrono::steady_clock::duration::zero();
  bool stopped = nonblocking && freeze(frozen);
  if (stopped) {
    std::thread poker([&] {
      std::this_thread::sleep_for(100ms);
      poked = true;
      if (write(fds[1], "!", 1) != 1) poked = false;
    });
    auto start = std::chrono::steady_clock::now();
    got = code_of([&] { (void)client.try_lock_for(name, 10s, options); }, &message);
    took = std::chrono::steady_clock::now() - start;
    poker.join();
  }
  kill(frozen, SIGCONT);
  close(fds[0]);
  close(fds[1]);
  if (got != REDMUTEX_RESULT_INTERRUPTED) {
    std::fprintf(stderr, "the error said: %s\n", message.c_str());
  }
  CHECK(nonblocking);
  CHECK(stopped);
  CHECK(got == REDMUTEX_RESULT_INTERRUPTED);
  CHECK(asked >= 1);
  // Ended by the descriptor, some 100 ms in.
  CHECK(took < 2s);
  // The server ran the request when it woke (the fence counter moved past the warm-up's),
  // then the undo behind it (the lock key is gone).
  std::string fence_key = "{" + name + "}:fence";
  auto deadline = std::chrono::steady_clock::now() + 3s;
  bool undone = false;
  for (;;) {
    long long counter = raw_number(freezable_url(), "GET", fence_key.c_str());
    long long exists = raw_number(freezable_url(), "EXISTS", name.c_str());
    undone = counter > static_cast<long long>(fence) && exists == 0;
    if (undone || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(5ms);
  }
  CHECK(undone);
}

int main() {
  RUN(test_version_matches_c_api);
  RUN(test_guard_releases_at_the_end_of_its_scope);
  RUN(test_guard_is_move_only_and_moves_ownership);
  RUN(test_try_lock_for_waits_for_the_release);
  RUN(test_errors_carry_the_result_code_and_message);
  RUN(test_unlock_reports_a_lost_lock_and_on_lost_runs);
  RUN(test_token_and_owner_label);
  RUN(test_servers_say_what_each_node_runs);
  RUN(test_stats_count_grants_refusals_and_releases);
  RUN(test_stats_count_a_failure);
  RUN(test_stats_count_each_kind_apart);
  RUN(test_stats_count_handoffs_and_renewal_lag);
  RUN(test_connections_are_counted_per_node);
  RUN(test_status_names_the_holder);
  RUN(test_list_and_force_unlock);
  RUN(test_a_node_not_waited_for_is_named_so);
  RUN(test_interrupt_every_wait_ends_a_read_from_a_frozen_server);
  return TESTING_SUMMARY();
}
