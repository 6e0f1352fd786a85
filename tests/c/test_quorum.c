/* Redlock through the C API: five independent redis-servers (REDMUTEX_TEST_URLS5), some of
 * them replaced by loopback ports where nobody listens. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "redmutex.h"
#include "support.h"
#include "testing.h"
#include "frozen.h"

/* A client on `up` of the five test servers plus `5 - up` dead ports. */
struct cluster {
  char storage[1024];
  char dead[5][64];
  int fds[5];
  const char *urls[5];
  redmutex_client *client;
};

static bool cluster_open(struct cluster *c, int up, long connect_timeout_ms) {
  const char *live[5];
  redmutex_client_options *options = NULL;
  int i;
  bool ok;
  for (i = 0; i < 5; i++) c->fds[i] = -1;
  c->client = NULL;
  if (test_urls5(c->storage, sizeof c->storage, live) != 5) return false;
  for (i = 0; i < 5; i++) {
    if (i < up) {
      c->urls[i] = live[i];
    } else {
      c->fds[i] = closed_port(c->dead[i], sizeof c->dead[i]);
      if (c->fds[i] < 0) return false;
      c->urls[i] = c->dead[i];
    }
  }
  if (redmutex_client_options_new(&options) != REDMUTEX_RESULT_OK) return false;
  redmutex_client_options_set_connect_timeout(options, (uint64_t)connect_timeout_ms);
  ok = redmutex_client_new_with_options(c->urls, 5, options, &c->client) == REDMUTEX_RESULT_OK;
  redmutex_client_options_free(options);
  return ok;
}

static void cluster_close(struct cluster *c) {
  int i;
  redmutex_client_free(c->client);
  for (i = 0; i < 5; i++) {
    if (c->fds[i] >= 0) close(c->fds[i]);
  }
}

static void test_five_nodes_lock_and_unlock(void) {
  char name[128];
  struct cluster c;
  redmutex_guard *guard = NULL;
  redmutex_guard *other = NULL;
  bool locked = false;
  CHECK(cluster_open(&c, 5, 1000));
  unique_name(name, sizeof name, "five");

  CHECK_OK(redmutex_lock(c.client, name, 30000, 0, &guard));
  CHECK(redmutex_guard_fence(guard) >= 1);
  CHECK_OK(redmutex_is_locked(c.client, name, &locked));
  CHECK(locked);
  CHECK_RESULT(redmutex_lock(c.client, name, 30000, 0, &other), REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK_OK(redmutex_unlock(guard));
  cluster_close(&c);
}

static void test_two_of_five_down_still_locks(void) {
  char name[128];
  struct cluster c;
  redmutex_guard *guard = NULL;
  CHECK(cluster_open(&c, 3, 1000));
  unique_name(name, sizeof name, "three-up");

  CHECK_OK(redmutex_lock(c.client, name, 30000, 0, &guard));
  CHECK(redmutex_guard_is_held(guard));
  CHECK_OK(redmutex_guard_extend(guard, 30000));
  CHECK_OK(redmutex_unlock(guard));
  cluster_close(&c);
}

static void test_three_of_five_down_is_no_quorum(void) {
  char name[128];
  struct cluster c;
  redmutex_guard *guard = (redmutex_guard *)&guard;
  bool locked = true;
  CHECK(cluster_open(&c, 2, 1000));
  unique_name(name, sizeof name, "two-up");

  CHECK_RESULT(redmutex_lock(c.client, name, 30000, 0, &guard), REDMUTEX_RESULT_NO_QUORUM);
  CHECK(guard == (redmutex_guard *)&guard);
  /* The message reports every node: two granted, three unreachable, with their addresses. */
  CHECK(last_error_contains("no quorum"));
  CHECK(last_error_contains(c.dead[2] + strlen("redis://")));
  CHECK(last_error_contains(c.dead[4] + strlen("redis://")));
  CHECK(last_error_contains("unreachable"));
  CHECK_RESULT(redmutex_is_locked(c.client, name, &locked), REDMUTEX_RESULT_NO_QUORUM);
  CHECK(locked);
  cluster_close(&c);
}

/* A round ends as soon as no majority can grant: two of three nodes fail at once (their fence
 * counter holds no number) and the third, frozen with SIGSTOP, is not waited for. The message
 * names it so, and calls no node unreachable. */
static void test_a_node_not_waited_for_is_named_so(void) {
  char storage[1024];
  char name[128];
  char frozen_report[160];
  const char *live[5];
  const char *urls[3];
  redmutex_client *client = NULL;
  redmutex_guard *guard = NULL;
  redmutex_result first;
  redmutex_result got = REDMUTEX_RESULT_OK;
  bool broken = false;
  bool named = false;
  bool unreachable = true;
  pid_t frozen = freezable_pid();
  CHECK(frozen > 1);
  CHECK(test_urls5(storage, sizeof storage, live) == 5);
  urls[0] = live[0];
  urls[1] = live[1];
  urls[2] = freezable_url();
  unique_name(name, sizeof name, "not-waited-for");
  snprintf(frozen_report, sizeof frozen_report, "%s: not waited for", urls[2]);
  client = client_of(urls, 3);
  CHECK(client != NULL);

  /* Everything runs before the first check, so that a failure still thaws the server and
   * frees the client. */
  first = redmutex_lock(client, name, 10000, 0, &guard); /* pooled connections everywhere */
  if (first == REDMUTEX_RESULT_OK) first = redmutex_unlock(guard);
  guard = NULL;
  broken = break_fence(urls[0], name) && break_fence(urls[1], name);
  if (first == REDMUTEX_RESULT_OK && broken && kill(frozen, SIGSTOP) == 0) {
    got = redmutex_lock(client, name, 10000, 0, &guard);
    kill(frozen, SIGCONT);
    named = last_error_contains(frozen_report);
    unreachable = last_error_contains("unreachable");
  }
  if (got != REDMUTEX_RESULT_NO_QUORUM) fprintf(stderr, "last error: %s\n", last_error());
  if (guard != NULL) (void)redmutex_unlock(guard);
  redmutex_client_free(client);
  CHECK_OK(first);
  CHECK(broken);
  CHECK(got == REDMUTEX_RESULT_NO_QUORUM);
  CHECK(named);
  CHECK(!unreachable);
}

static void test_three_of_five_down_stops_a_forever_wait(void) {
  char name[128];
  struct cluster c;
  redmutex_guard *guard = NULL;
  double started;
  CHECK(cluster_open(&c, 2, 300));
  unique_name(name, sizeof name, "two-up-forever");

  started = now_ms();
  CHECK_RESULT(redmutex_lock(c.client, name, 30000, -1, &guard), REDMUTEX_RESULT_NO_QUORUM);
  CHECK(now_ms() - started < 10000);
  CHECK(guard == NULL);
  /* The grants the two live nodes gave were undone: a quorum of live nodes locks at once. */
  cluster_close(&c);
  CHECK(cluster_open(&c, 5, 1000));
  CHECK_OK(redmutex_lock(c.client, name, 30000, 0, &guard));
  CHECK_OK(redmutex_unlock(guard));
  cluster_close(&c);
}

int main(void) {
  RUN(test_five_nodes_lock_and_unlock);
  RUN(test_two_of_five_down_still_locks);
  RUN(test_three_of_five_down_is_no_quorum);
  RUN(test_three_of_five_down_stops_a_forever_wait);
  RUN(test_a_node_not_waited_for_is_named_so);
  return TESTING_SUMMARY();
}
