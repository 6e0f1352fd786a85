/* redmutex_client_stats: each figure moves when the thing it counts happens through the C API
 * (a grant, a refusal, a wait that runs out, a release, a loss, a hand-off, a renewal, a
 * connection), and the struct is versioned by its size: an older, shorter struct is filled
 * only as far as it goes. redmutex_client_connections: the connections open to each node. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "redmutex.h"
#include "support.h"
#include "testing.h"
#include "frozen.h"

/* The client's figures now, into `*s` (zeroed when the call fails: the test fails too). */
static void stats_of(redmutex_client *client, redmutex_stats *s) {
  memset(s, 0, sizeof *s);
  s->size = sizeof *s;
  CHECK_OK(redmutex_client_stats(client, s));
  CHECK(s->size == sizeof *s);
}

static void test_grants_refusals_timeouts_and_releases_are_counted(void) {
  char name[128];
  redmutex_client *client = test_client();
  redmutex_guard *guard = NULL, *other = NULL;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "stats");
  redmutex_stats s;
  stats_of(client, &s);
  CHECK(s.acquired == 0 && s.held_now == 0 && s.wait_seconds.count == 0);
  CHECK(s.wait_seconds.bounds[0] == 0.0001 && s.wait_seconds.bounds[16] == 60.0);

  CHECK_OK(redmutex_lock(client, name, 30000, 0, &guard));
  stats_of(client, &s);
  CHECK(s.acquired == 1 && s.held_now == 1 && s.wait_seconds.count == 1);
  CHECK_RESULT(redmutex_lock(client, name, 30000, 0, &other), REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK_RESULT(redmutex_lock(client, name, 30000, 50, &other), REDMUTEX_RESULT_WOULD_BLOCK);
  stats_of(client, &s);
  CHECK(s.refused == 1 && s.timed_out == 1 && s.failed == 0 && s.waiting_now == 0);

  CHECK_OK(redmutex_unlock(guard));
  stats_of(client, &s);
  CHECK(s.held_now == 0 && s.lost == 0);
  CHECK(s.held_seconds.count == 1 && s.held_seconds.sum > 0.0);
  uint64_t in_buckets = 0;
  for (size_t i = 0; i < REDMUTEX_HISTOGRAM_BUCKETS; i++) in_buckets += s.held_seconds.buckets[i];
  CHECK(in_buckets == 1);
  redmutex_client_free(client);
}

/* A call that cannot reach Redis (its one node refuses connections) is a failure: counted as
 * failed, under its kind too, and as nothing else. */
static void test_a_call_that_cannot_reach_redis_is_a_failure(void) {
  char dead[64];
  char name[128];
  redmutex_client *client = NULL;
  redmutex_guard *guard = NULL;
  redmutex_stats s;
  int fd = closed_port(dead, sizeof dead);
  CHECK(fd >= 0);
  unique_name(name, sizeof name, "stats-failed");
  client = client_for(dead);
  CHECK(client != NULL);
  CHECK_RESULT(redmutex_lock(client, name, 30000, 0, &guard), REDMUTEX_RESULT_CONNECTION);
  CHECK(guard == NULL);
  stats_of(client, &s);
  CHECK(s.failed == 1 && s.by_kind_mutex.failed == 1);
  CHECK(s.acquired == 0 && s.refused == 0 && s.timed_out == 0 && s.interrupted == 0);
  CHECK(s.held_now == 0 && s.waiting_now == 0);
  redmutex_client_free(client);
  close(fd);
}

/* A key deleted behind the holder's back is found gone at the next renewal (TTL 300 ms:
 * renewed every 100 ms): one loss, counted as "gone". */
static void test_a_loss_is_counted_with_its_reason(void) {
  char name[128];
  char command[512];
  redmutex_client *client = test_client();
  redmutex_guard *guard = NULL;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "stats-gone");
  CHECK_OK(redmutex_lock(client, name, 300, 0, &guard));
  snprintf(command, sizeof command, "redis-cli -u '%s' DEL '%s' >/dev/null",
           testing_env("REDMUTEX_TEST_URL"), name);
  CHECK(system(command) == 0);
  bool lost = false;
  CHECK_OK(redmutex_guard_wait_lost(guard, 5000, &lost));
  CHECK(lost);
  redmutex_stats s;
  stats_of(client, &s);
  CHECK(s.lost == 1 && s.lost_gone == 1 && s.held_now == 0);
  CHECK(s.lost_another_owner == 0 && s.lost_validity_ran_out == 0);
  CHECK(s.renewal_failures >= 1);
  redmutex_guard_free(guard);
  redmutex_client_free(client);
}

/* Waits (at most 10 s: valgrind is slow) until `pred` holds for the client's figures, which
 * are left in `*s`. */
static bool stats_until(redmutex_client *client, redmutex_stats *s,
                        bool (*pred)(const redmutex_stats *)) {
  double until = now_ms() + 10000;
  for (;;) {
    memset(s, 0, sizeof *s);
    s->size = sizeof *s;
    if (redmutex_client_stats(client, s) != REDMUTEX_RESULT_OK) return false;
    if (pred(s)) return true;
    if (now_ms() > until) return false;
    sleep_ms(10);
  }
}

/* Whether the lost_* figures are these, and add up to `lost` (the reasons on stderr when
 * not). */
static bool lost_by_reason(const redmutex_stats *s, uint64_t another_owner, uint64_t gone,
                           uint64_t nodes_down, uint64_t validity_ran_out, uint64_t max_hold) {
  uint64_t sum = s->lost_another_owner + s->lost_gone + s->lost_nodes_down +
                 s->lost_validity_ran_out + s->lost_max_hold;
  if (s->lost_another_owner == another_owner && s->lost_gone == gone &&
      s->lost_nodes_down == nodes_down && s->lost_validity_ran_out == validity_ran_out &&
      s->lost_max_hold == max_hold && s->lost == sum) {
    return true;
  }
  fprintf(stderr,
          "lost %" PRIu64 ": another_owner %" PRIu64 ", gone %" PRIu64 ", nodes_down %" PRIu64
          ", validity_ran_out %" PRIu64 ", max_hold %" PRIu64 "\n",
          s->lost, s->lost_another_owner, s->lost_gone, s->lost_nodes_down,
          s->lost_validity_ran_out, s->lost_max_hold);
  return false;
}

/* Waits (at most 10 s) until `guard` is lost, frees it, and checks that the reason it gives
 * contains `why`. */
static bool lost_saying(redmutex_guard *guard, const char *why) {
  bool lost = false;
  bool said = false;
  if (redmutex_guard_wait_lost(guard, 10000, &lost) == REDMUTEX_RESULT_OK && lost) {
    said = redmutex_guard_check(guard) == REDMUTEX_RESULT_LOST && last_error_contains(why);
    if (!said) fprintf(stderr, "lost, but not for \"%s\": %s\n", why, last_error());
  } else {
    fprintf(stderr, "not lost within 10 s (expected: %s)\n", why);
  }
  redmutex_guard_free(guard);
  return said;
}

/* One loss for each reason that one server can show, on one client, each counted under its
 * own reason as it happens, the reasons adding up to `lost`: another owner's value put in
 * the key (the next renewal is refused with it), the key deleted (gone at the next renewal),
 * a lease nothing renews (its validity runs out), and a max_hold longer than the TTL (the
 * lease is renewed, then renewal stops at max_hold). Leases of 1 s where renewal matters
 * (renewed about every 330 ms): valgrind runs the renew thread slowly. A loss to nodes down
 * needs nodes of its own: see test_a_loss_to_nodes_down_is_counted_as_such. */
static void test_each_loss_is_counted_by_its_reason(void) {
  char other[128], gone[128], ran_out[128], max_hold[128];
  char command[512];
  const char *url = testing_env("REDMUTEX_TEST_URL");
  redmutex_client *client = test_client();
  redmutex_lock_options *options = NULL;
  redmutex_guard *guard = NULL;
  redmutex_result r;
  redmutex_stats s;
  CHECK(client != NULL);
  unique_name(other, sizeof other, "stats-lost-other");
  unique_name(gone, sizeof gone, "stats-lost-gone");
  unique_name(ran_out, sizeof ran_out, "stats-lost-ran-out");
  unique_name(max_hold, sizeof max_hold, "stats-lost-max-hold");

  CHECK_OK(redmutex_lock(client, other, 1000, 0, &guard));
  CHECK(raw_set(url, other, "someone-else"));
  CHECK(lost_saying(guard, "another owner"));
  stats_of(client, &s);
  CHECK(lost_by_reason(&s, 1, 0, 0, 0, 0));

  CHECK_OK(redmutex_lock(client, gone, 1000, 0, &guard));
  snprintf(command, sizeof command, "redis-cli -u '%s' DEL '%s' >/dev/null", url, gone);
  CHECK(system(command) == 0);
  CHECK(lost_saying(guard, "gone"));
  stats_of(client, &s);
  CHECK(lost_by_reason(&s, 1, 1, 0, 0, 0));

  CHECK_OK(lock_unrenewed(client, ran_out, 300, &guard));
  CHECK(lost_saying(guard, "auto-renew is off"));
  stats_of(client, &s);
  CHECK(lost_by_reason(&s, 1, 1, 0, 1, 0));

  uint64_t renewals = s.renewals;
  CHECK_OK(redmutex_lock_options_new(&options));
  redmutex_lock_options_set_ttl(options, 1000);
  redmutex_lock_options_set_max_hold(options, 1500);
  r = redmutex_lock_with_options(client, (const uint8_t *)max_hold, strlen(max_hold), options, 0,
                                 &guard);
  redmutex_lock_options_free(options);
  CHECK_OK(r);
  CHECK(lost_saying(guard, "max_hold"));
  stats_of(client, &s);
  CHECK(lost_by_reason(&s, 1, 1, 0, 1, 1));
  CHECK(s.renewals > renewals);

  CHECK(s.lost == 4 && s.acquired == 4 && s.held_now == 0);
  redmutex_client_free(client);
}

/* Starts a redis-server of this test's own, which it may kill without harm to the servers
 * the other tests share, on a free loopback port below Linux's ephemeral range (as
 * scripts/lib/redis.sh does); its URL goes to `url`. Returns its pid, or -1 when none came
 * up in ten tries. */
static pid_t start_own_server(char *url, size_t url_len) {
  srand((unsigned)getpid() ^ (unsigned)now_ms());
  for (int attempt = 0; attempt < 10; attempt++) {
    char port[16];
    snprintf(port, sizeof port, "%d", 20000 + rand() % 12000);
    snprintf(url, url_len, "redis://127.0.0.1:%s", port);
    char *argv[] = {"redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "no", "--daemonize", "no", "--dir", "/tmp", NULL};
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
      int null = open("/dev/null", O_WRONLY);
      if (null >= 0) {
        dup2(null, STDOUT_FILENO);
        dup2(null, STDERR_FILENO);
      }
      execvp(argv[0], argv);
      _exit(127);
    }
    bool ended = false;
    double until = now_ms() + 5000;
    while (now_ms() < until) {
      if (waitpid(pid, NULL, WNOHANG) == pid) { /* the port was taken: try another */
        ended = true;
        break;
      }
      if (raw_set(url, "redmutex-c-test:up", "1")) return pid;
      sleep_ms(20);
    }
    if (!ended) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
    }
  }
  return -1;
}

static bool lost_one(const redmutex_stats *s) { return s->lost >= 1; }

/* Nodes down: three nodes, one of which never listens (it refuses connections), one a
 * redis-server of this test's own and one the freezable server. The two live ones grant a
 * 1 s lease. Right after a renewal, the own server is killed (from then on it refuses
 * connections too) and the freezable one frozen (SIGSTOP). The next renewal round waits for
 * the frozen node as long as the node timeout, here the TTL, so it ends after the validity
 * did, with two of the three nodes refusing connections: lost, "nodes down". (Were the third
 * node not frozen, the rounds would end at once and the validity run out between two of them:
 * "validity ran out", as with one dead node, which one server cannot avoid.) Nothing waits
 * with redmutex_guard_wait_lost until the loss is counted: a wait that wakes at the validity
 * deadline finds the lease run out and ends it itself, with that reason. */
static void test_a_loss_to_nodes_down_is_counted_as_such(void) {
  char dead[64], own[64], name[128];
  const char *urls[3];
  pid_t frozen = freezable_pid();
  pid_t server = -1;
  int fd = -1;
  redmutex_client *client = NULL;
  redmutex_lock_options *options = NULL;
  redmutex_guard *guard = NULL;
  redmutex_result locked = REDMUTEX_RESULT_NULL_PARAMETER;
  redmutex_stats s;
  bool started, made = false, renewed = false, stopped = false, counted = false;
  bool lost = false, said = false;
  memset(&s, 0, sizeof s);
  CHECK(frozen > 1);
  /* The server first: it would inherit the socket that keeps the dead port. */
  server = start_own_server(own, sizeof own);
  started = server > 0;
  fd = closed_port(dead, sizeof dead);
  if (fd < 0) started = false;
  urls[0] = dead;
  urls[1] = own;
  urls[2] = freezable_url();
  unique_name(name, sizeof name, "stats-nodes-down");
  if (started) client = client_of(urls, 3);
  made = client != NULL;

  /* Everything runs before the first check, so that a failure still thaws the frozen server,
   * ends the own one and frees the client. */
  if (client != NULL && redmutex_lock_options_new(&options) == REDMUTEX_RESULT_OK) {
    redmutex_lock_options_set_ttl(options, 1000);
    redmutex_lock_options_set_node_timeout(options, 1000);
    locked = redmutex_lock_with_options(client, (const uint8_t *)name, strlen(name), options,
                                        5000, &guard);
    redmutex_lock_options_free(options);
  }
  if (locked == REDMUTEX_RESULT_OK) {
    /* A renewal just ended: the next one is about 330 ms away. */
    uint64_t before = redmutex_guard_renewals(guard);
    double until = now_ms() + 10000;
    while (!(renewed = redmutex_guard_renewals(guard) > before) && now_ms() < until) sleep_ms(1);
  }
  if (renewed && kill(server, SIGKILL) == 0 && waitpid(server, NULL, 0) == server) {
    server = -1;
    stopped = kill(frozen, SIGSTOP) == 0;
  }
  if (stopped) {
    counted = stats_until(client, &s, lost_one);
    kill(frozen, SIGCONT);
  }
  if (counted && redmutex_guard_wait_lost(guard, 0, &lost) == REDMUTEX_RESULT_OK && lost) {
    said = redmutex_guard_check(guard) == REDMUTEX_RESULT_LOST &&
           last_error_contains("nodes are down");
    if (!said) fprintf(stderr, "lost, but not for nodes down: %s\n", last_error());
  }
  if (server > 0) {
    kill(server, SIGKILL);
    waitpid(server, NULL, 0);
  }
  if (fd >= 0) close(fd);
  redmutex_guard_free(guard);
  redmutex_client_free(client);
  CHECK(started);
  CHECK(made);
  CHECK_OK(locked);
  CHECK(renewed);
  CHECK(stopped);
  CHECK(counted);
  CHECK(lost);
  CHECK(lost_by_reason(&s, 0, 0, 1, 0, 0));
  CHECK(said);
  CHECK(s.renewal_failures >= 1 && s.held_now == 0);
}

/* A mutex granted and refused, a read hold granted, a semaphore permit granted and its wait
 * run out: each counted under its own kind, and the kinds add up to the totals. A write
 * hold is a mutex. */
static void test_each_kind_is_counted_apart_and_adds_up(void) {
  char m[128], rw[128], sem[128];
  redmutex_client *client = test_client();
  redmutex_guard *mutex = NULL, *read = NULL, *permit = NULL, *other = NULL;
  CHECK(client != NULL);
  unique_name(m, sizeof m, "stats-kind-m");
  unique_name(rw, sizeof rw, "stats-kind-rw");
  unique_name(sem, sizeof sem, "stats-kind-s");
  CHECK_OK(redmutex_lock(client, m, 30000, 0, &mutex));
  CHECK_RESULT(redmutex_lock(client, m, 30000, 0, &other), REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK_OK(redmutex_read_lock(client, rw, 30000, 0, &read));
  CHECK_RESULT(redmutex_write_lock(client, rw, 30000, 0, &other), REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK_OK(redmutex_semaphore_acquire(client, sem, 1, 30000, 0, &permit));
  CHECK_RESULT(redmutex_semaphore_acquire(client, sem, 1, 30000, 50, &other),
               REDMUTEX_RESULT_WOULD_BLOCK);
  redmutex_stats s;
  stats_of(client, &s);
  CHECK(s.by_kind_mutex.acquired == 1 && s.by_kind_mutex.refused == 2);
  CHECK(s.by_kind_mutex.timed_out == 0 && s.by_kind_mutex.failed == 0);
  CHECK(s.by_kind_read.acquired == 1 && s.by_kind_read.refused == 0);
  CHECK(s.by_kind_semaphore.acquired == 1 && s.by_kind_semaphore.timed_out == 1);
  CHECK(s.by_kind_semaphore.refused == 0);
  const redmutex_outcomes *kinds[] = {&s.by_kind_mutex, &s.by_kind_semaphore, &s.by_kind_read};
  redmutex_outcomes total = {0, 0, 0, 0, 0};
  for (size_t i = 0; i < 3; i++) {
    total.acquired += kinds[i]->acquired;
    total.refused += kinds[i]->refused;
    total.timed_out += kinds[i]->timed_out;
    total.interrupted += kinds[i]->interrupted;
    total.failed += kinds[i]->failed;
  }
  CHECK(total.acquired == s.acquired && s.acquired == 3);
  CHECK(total.refused == s.refused && total.timed_out == s.timed_out);
  CHECK(total.interrupted == s.interrupted && total.failed == s.failed);
  CHECK_OK(redmutex_unlock(mutex));
  CHECK_OK(redmutex_unlock(read));
  CHECK_OK(redmutex_unlock(permit));
  redmutex_client_free(client);
}

struct waiter {
  redmutex_client *client;
  const char *name;
  redmutex_result result;
};

static void *wait_then_release(void *p) {
  struct waiter *w = p;
  redmutex_guard *guard = NULL;
  w->result = redmutex_lock(w->client, w->name, 30000, 30000, &guard);
  if (w->result == REDMUTEX_RESULT_OK) w->result = redmutex_unlock(guard);
  return NULL;
}

static bool one_waiting(const redmutex_stats *s) { return s->waiting_now == 1; }

static int note_waiters(const redmutex_listed_lock *lock, void *waiters) {
  *(uint64_t *)waiters = lock->waiters;
  return 1;
}

/* Waits (at most 10 s) until a caller has announced in Redis that it waits for `name`: it
 * was refused once and waits for the release (a call counts in waiting_now from its start,
 * before its first attempt, so that alone could let the release come first). */
static bool waiter_announced(redmutex_client *client, const char *name) {
  double until = now_ms() + 10000;
  for (;;) {
    uint64_t waiters = 0;
    if (redmutex_list(client, name, note_waiters, &waiters) != REDMUTEX_RESULT_OK) return false;
    if (waiters >= 1) return true;
    if (now_ms() > until) return false;
    sleep_ms(10);
  }
}

/* A thread that waits for a held lock and gets it at its release: a hand-off received, and
 * counted by the waiter's client only (the holder's grant came at once). */
static void test_a_grant_at_the_release_is_a_handoff(void) {
  char name[128];
  redmutex_client *holder = test_client();
  redmutex_guard *held = NULL;
  CHECK(holder != NULL);
  unique_name(name, sizeof name, "stats-handoff");
  CHECK_OK(redmutex_lock(holder, name, 30000, 0, &held));
  struct waiter w = {test_client(), name, REDMUTEX_RESULT_OK};
  CHECK(w.client != NULL);
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, wait_then_release, &w) == 0);
  redmutex_stats s;
  bool waiting = stats_until(w.client, &s, one_waiting) && waiter_announced(holder, name);
  redmutex_result released = redmutex_unlock(held);
  pthread_join(thread, NULL);
  CHECK(waiting);
  CHECK_OK(released);
  CHECK_OK(w.result);
  stats_of(w.client, &s);
  CHECK(s.acquired == 1 && s.waiting_now == 0 && s.held_now == 0);
  CHECK(s.handoffs == 1);
  stats_of(holder, &s);
  CHECK(s.acquired == 1 && s.handoffs == 0);
  redmutex_client_free(w.client);
  redmutex_client_free(holder);
}

static bool renewed_twice(const redmutex_stats *s) { return s->renewals >= 2; }

/* A 1 s lease is renewed about every 330 ms (a shorter one could be lost while valgrind runs
 * the renew thread slowly): each renewal sent is measured against its schedule, in the
 * renewal-lag histogram. */
static void test_renewals_are_measured_for_lag(void) {
  char name[128];
  redmutex_client *client = test_client();
  redmutex_guard *guard = NULL;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "stats-renewed");
  redmutex_stats s;
  stats_of(client, &s);
  CHECK(s.renewal_lag_seconds.count == 0 && s.renewal_lag_seconds.bounds[16] == 60.0);
  CHECK_OK(redmutex_lock(client, name, 1000, 0, &guard));
  bool renewed = stats_until(client, &s, renewed_twice);
  CHECK_OK(redmutex_unlock(guard));
  CHECK(renewed);
  stats_of(client, &s);
  CHECK(s.renewal_lag_seconds.count > 0);
  CHECK(s.renewal_lag_seconds.count == s.renewals + s.renewal_failures);
  CHECK(s.renewal_lag_seconds.sum >= 0.0);
  uint64_t in_buckets = 0;
  for (size_t i = 0; i < REDMUTEX_HISTOGRAM_BUCKETS; i++) {
    in_buckets += s.renewal_lag_seconds.buckets[i];
  }
  CHECK(in_buckets == s.renewal_lag_seconds.count);
  redmutex_client_free(client);
}

/* No connection before the first call; one at least after it, per node in the order of the
 * URLs, and their sum in the struct. */
static void test_open_connections_are_counted_per_node(void) {
  char name[128];
  redmutex_client *client = test_client();
  CHECK(client != NULL);
  unique_name(name, sizeof name, "stats-conns");
  redmutex_stats s;
  stats_of(client, &s);
  CHECK(s.connections_open == 0);
  uint64_t counts[4] = {7, 7, 7, 7};
  size_t n = 0;
  CHECK_OK(redmutex_client_connections(client, counts, 4, &n));
  CHECK(n == 1 && counts[0] == 0 && counts[1] == 7);

  bool locked = true;
  CHECK_OK(redmutex_is_locked(client, name, &locked));
  CHECK(!locked);
  stats_of(client, &s);
  CHECK(s.connections_open >= 1);
  n = 0;
  CHECK_OK(redmutex_client_connections(client, counts, 4, &n));
  CHECK(n == 1 && counts[0] == s.connections_open && counts[1] == 7);
  /* How many nodes, without a buffer; a buffer too short is filled as far as it goes. */
  n = 0;
  CHECK_OK(redmutex_client_connections(client, NULL, 0, &n));
  CHECK(n == 1);

  CHECK_RESULT(redmutex_client_connections(client, NULL, 1, &n), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_client_connections(client, counts, 4, NULL),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_client_connections(NULL, counts, 4, &n), REDMUTEX_RESULT_NULL_PARAMETER);
  redmutex_client_free(client);
}

/* Redlock: one count per node, a majority of them connected after a grant. */
static void test_each_node_of_several_has_its_count(void) {
  char storage[1024], name[128];
  const char *urls[5];
  CHECK(test_urls5(storage, sizeof storage, urls) == 5);
  redmutex_client *client = client_of(urls, 5);
  redmutex_guard *guard = NULL;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "stats-conns5");
  CHECK_OK(redmutex_lock(client, name, 30000, 0, &guard));
  CHECK_OK(redmutex_unlock(guard));
  uint64_t counts[5] = {0, 0, 0, 0, 0}, two[2] = {0, 0};
  size_t n = 0, connected = 0;
  CHECK_OK(redmutex_client_connections(client, two, 2, &n));
  CHECK(n == 5);
  CHECK_OK(redmutex_client_connections(client, counts, 5, &n));
  CHECK(n == 5);
  for (size_t i = 0; i < 5; i++) connected += counts[i] > 0;
  CHECK(connected >= 3);
  redmutex_client_free(client);
}

static void test_the_struct_is_versioned_by_its_size(void) {
  redmutex_client *client = test_client();
  CHECK(client != NULL);
  redmutex_stats s;
  memset(&s, 0xAB, sizeof s);
  s.size = 0;
  CHECK_RESULT(redmutex_client_stats(client, &s), REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK(last_error_contains("sizeof(redmutex_stats)"));
  CHECK_RESULT(redmutex_client_stats(client, NULL), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_client_stats(NULL, &s), REDMUTEX_RESULT_NULL_PARAMETER);
  /* An older program's struct, which ended after `refused`: the rest is left alone. */
  s.size = offsetof(redmutex_stats, timed_out);
  CHECK_OK(redmutex_client_stats(client, &s));
  CHECK(s.size == offsetof(redmutex_stats, timed_out));
  CHECK(s.acquired == 0 && s.refused == 0);
  CHECK(s.timed_out == 0xABABABABABABABABull);
  /* A program built before the by-kind figures: filled up to `held_seconds`, no further. */
  memset(&s, 0xAB, sizeof s);
  s.size = offsetof(redmutex_stats, by_kind_mutex);
  CHECK_OK(redmutex_client_stats(client, &s));
  CHECK(s.size == offsetof(redmutex_stats, by_kind_mutex));
  CHECK(s.held_now == 0 && s.held_seconds.count == 0 && s.held_seconds.bounds[16] == 60.0);
  CHECK(s.by_kind_mutex.acquired == 0xABABABABABABABABull);
  CHECK(s.connections_open == 0xABABABABABABABABull);
  /* A struct longer than this library's (a newer header): filled as far as this one goes. */
  struct {
    redmutex_stats s;
    unsigned char more[16];
  } longer;
  memset(&longer, 0xAB, sizeof longer);
  longer.s.size = sizeof longer;
  CHECK_OK(redmutex_client_stats(client, &longer.s));
  CHECK(longer.s.size == sizeof(redmutex_stats) && longer.s.acquired == 0);
  CHECK(longer.more[0] == 0xAB && longer.more[15] == 0xAB);
  redmutex_client_free(client);
}

int main(void) {
  RUN(test_grants_refusals_timeouts_and_releases_are_counted);
  RUN(test_a_call_that_cannot_reach_redis_is_a_failure);
  RUN(test_a_loss_is_counted_with_its_reason);
  RUN(test_each_loss_is_counted_by_its_reason);
  RUN(test_a_loss_to_nodes_down_is_counted_as_such);
  RUN(test_each_kind_is_counted_apart_and_adds_up);
  RUN(test_a_grant_at_the_release_is_a_handoff);
  RUN(test_renewals_are_measured_for_lag);
  RUN(test_open_connections_are_counted_per_node);
  RUN(test_each_node_of_several_has_its_count);
  RUN(test_the_struct_is_versioned_by_its_size);
  return TESTING_SUMMARY();
}
