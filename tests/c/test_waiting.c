/* Waiting at scale from C: of many threads waiting on one lock through one client, one
 * blocks on Redis; the others wait in the client without a connection or a command, and
 * after the release every one of them gets the lock once, never two at a time. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redmutex.h"
#include "support.h"
#include "testing.h"

enum { WAITERS = 24 };

struct waiters {
  redmutex_client *client;
  const char *name;
  atomic_int started;
  atomic_int inside;
  atomic_int taken;
  atomic_int overlaps;
  atomic_int failures;
};

static void *wait_once(void *p) {
  struct waiters *w = p;
  redmutex_guard *guard = NULL;
  atomic_fetch_add(&w->started, 1);
  if (redmutex_lock(w->client, w->name, 30000, 120000, &guard) != REDMUTEX_RESULT_OK) {
    fprintf(stderr, "lock: %s\n", last_error());
    atomic_fetch_add(&w->failures, 1);
    return NULL;
  }
  if (atomic_fetch_add(&w->inside, 1) != 0) atomic_fetch_add(&w->overlaps, 1);
  atomic_fetch_add(&w->taken, 1);
  atomic_fetch_sub(&w->inside, 1);
  if (redmutex_unlock(guard) != REDMUTEX_RESULT_OK) atomic_fetch_add(&w->failures, 1);
  return NULL;
}

/* `INFO clients`'s blocked_clients of the test server (through redis-cli), or -1. */
static int blocked_clients(void) {
  char cmd[512], line[256];
  int blocked = -1;
  FILE *out;
  snprintf(cmd, sizeof cmd, "redis-cli -u '%s' INFO clients", testing_env("REDMUTEX_TEST_URL"));
  out = popen(cmd, "r");
  if (out == NULL) return -1;
  while (fgets(line, sizeof line, out) != NULL) {
    if (strncmp(line, "blocked_clients:", 16) == 0) blocked = atoi(line + 16);
  }
  pclose(out);
  return blocked;
}

static void test_one_of_many_waiting_threads_blocks_on_redis(void) {
  char name[128];
  pthread_t threads[WAITERS];
  static struct waiters w;
  redmutex_guard *held = NULL;
  redmutex_client *holder = test_client();
  int i, most = 0, least = WAITERS;
  double until;
  CHECK(holder != NULL);
  unique_name(name, sizeof name, "waiting");
  CHECK(redmutex_lock(holder, name, 60000, -1, &held) == REDMUTEX_RESULT_OK);
  memset(&w, 0, sizeof w);
  w.client = test_client();
  w.name = name;
  CHECK(w.client != NULL);
  for (i = 0; i < WAITERS; i++) CHECK(pthread_create(&threads[i], NULL, wait_once, &w) == 0);
  until = now_ms() + 30000;
  while (atomic_load(&w.started) < WAITERS && now_ms() < until) sleep_ms(10);
  CHECK(atomic_load(&w.started) == WAITERS);
  /* Sampled over two seconds (their first rounds announce them, then they wait): one
   * connection is blocked at a time, never one per thread. */
  sleep_ms(500);
  for (i = 0; i < 20; i++) {
    int blocked = blocked_clients();
    CHECK(blocked >= 0);
    if (blocked > most) most = blocked;
    if (blocked < least) least = blocked;
    sleep_ms(100);
  }
  printf("     %d threads waiting: %d to %d connections blocked\n", WAITERS, least, most);
  CHECK(most <= 1);
  CHECK(redmutex_unlock(held) == REDMUTEX_RESULT_OK);
  for (i = 0; i < WAITERS; i++) pthread_join(threads[i], NULL);
  CHECK(atomic_load(&w.failures) == 0);
  CHECK(atomic_load(&w.overlaps) == 0);
  CHECK(atomic_load(&w.taken) == WAITERS);
  redmutex_client_free(w.client);
  redmutex_client_free(holder);
}

/* `INFO stats`'s total_commands_processed of the test server (through redis-cli), or -1. */
static long long commands_processed(void) {
  char cmd[512], line[256];
  long long n = -1;
  FILE *out;
  snprintf(cmd, sizeof cmd, "redis-cli -u '%s' INFO stats", testing_env("REDMUTEX_TEST_URL"));
  out = popen(cmd, "r");
  if (out == NULL) return -1;
  while (fgets(line, sizeof line, out) != NULL) {
    if (strncmp(line, "total_commands_processed:", 25) == 0) n = atoll(line + 25);
  }
  pclose(out);
  return n;
}

struct one_waiter {
  redmutex_client *client;
  const char *name;
  redmutex_result result;
};

static void *wait_long(void *p) {
  struct one_waiter *w = p;
  redmutex_guard *guard = NULL;
  w->result = redmutex_lock(w->client, w->name, 30000, 60000, &guard);
  if (w->result == REDMUTEX_RESULT_OK) w->result = redmutex_unlock(guard);
  return NULL;
}

/* A waiter behind a lock held for long: its waits grow from 250 ms to the 2 s cap while
 * nothing is released, so it costs Redis a round every 2 s, and still gets the lock. */
static void test_a_long_wait_costs_redis_a_handful_of_commands_a_second(void) {
  char name[128];
  static struct one_waiter w;
  pthread_t thread;
  redmutex_guard *held = NULL;
  redmutex_client *holder = test_client();
  long long before, after;
  CHECK(holder != NULL);
  unique_name(name, sizeof name, "long");
  CHECK(redmutex_lock(holder, name, 60000, -1, &held) == REDMUTEX_RESULT_OK);
  w.client = test_client();
  w.name = name;
  w.result = REDMUTEX_RESULT_OK;
  CHECK(w.client != NULL);
  CHECK(pthread_create(&thread, NULL, wait_long, &w) == 0);
  sleep_ms(1750); /* 250 + 500 + 1000 ms of waits, then waits of the cap */
  before = commands_processed();
  sleep_ms(4000);
  after = commands_processed();
  CHECK(before >= 0 && after >= 0);
  printf("     a long wait: %.1f commands/s\n", (double)(after - before - 1) / 4.0);
  CHECK(after - before - 1 <= 24);
  CHECK(redmutex_unlock(held) == REDMUTEX_RESULT_OK);
  pthread_join(thread, NULL);
  CHECK(w.result == REDMUTEX_RESULT_OK);
  redmutex_client_free(w.client);
  redmutex_client_free(holder);
}

int main(void) {
  RUN(test_one_of_many_waiting_threads_blocks_on_redis);
  RUN(test_a_long_wait_costs_redis_a_handful_of_commands_a_second);
  return TESTING_SUMMARY();
}
