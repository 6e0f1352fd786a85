/*
 * A Redis Cluster as one voter, through the C API: `redis+cluster://` URLs against a real
 * three-master cluster (REDMUTEX_TEST_CLUSTER_URL, started by scripts/test-c.sh with the
 * usual slot ranges 0-5460, 5461-10922 and 10923-16383).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redmutex.h"
#include "support.h"
#include "testing.h"

#define SPREAD_NAMES 20

static const char *cluster_url(void) { return testing_env("REDMUTEX_TEST_CLUSTER_URL"); }

/* Redis Cluster's hash slot of a key without a hash tag: CRC16/XMODEM mod 16384. */
static unsigned key_slot(const char *key) {
  uint16_t crc = 0;
  int bit;
  for (; *key != '\0'; key++) {
    crc ^= (uint16_t)((unsigned char)*key << 8);
    for (bit = 0; bit < 8; bit++) {
      crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
  }
  return crc & 16383;
}

/* Which of the three masters serves `slot`, with the slots split as redis-cli does. */
static int master_of(unsigned slot) { return slot <= 5460 ? 0 : slot <= 10922 ? 1 : 2; }

static void test_key_slot_matches_redis(void) {
  /* Known answers of CLUSTER KEYSLOT. */
  CHECK(key_slot("") == 0);
  CHECK(key_slot("foo") == 12182);
  CHECK(key_slot("bar") == 5061);
  CHECK(key_slot("123456789") == 12739);
}

/* Fills `names` with SPREAD_NAMES unique names, 7, 7 and 6 of them served by each master. */
static int spread_names(char names[SPREAD_NAMES][96]) {
  int per_master[3] = {0, 0, 0};
  const int quota[3] = {7, 7, 6};
  int n = 0, i, m;
  char candidate[96];
  for (i = 0; n < SPREAD_NAMES && i < 100000; i++) {
    unique_name(candidate, sizeof candidate, "spread");
    m = master_of(key_slot(candidate));
    if (per_master[m] < quota[m]) {
      per_master[m]++;
      memcpy(names[n++], candidate, sizeof candidate);
    }
  }
  return n;
}

static void lock_names_on_every_master(const char *url) {
  char names[SPREAD_NAMES][96];
  redmutex_guard *guards[SPREAD_NAMES];
  redmutex_client *client = client_for(url);
  bool locked;
  int i;
  CHECK(client != NULL);
  CHECK(spread_names(names) == SPREAD_NAMES);

  /* All held at once: each on the master of its slot. */
  for (i = 0; i < SPREAD_NAMES; i++) {
    guards[i] = NULL;
    CHECK_OK(redmutex_lock(client, names[i], 30000, 0, &guards[i]));
    CHECK(redmutex_guard_is_held(guards[i]));
    CHECK(redmutex_guard_fence(guards[i]) >= 1);
  }
  for (i = 0; i < SPREAD_NAMES; i++) {
    locked = false;
    CHECK_OK(redmutex_is_locked(client, names[i], &locked));
    CHECK(locked);
  }
  for (i = 0; i < SPREAD_NAMES; i++) {
    CHECK_OK(redmutex_unlock(guards[i]));
    locked = true;
    CHECK_OK(redmutex_is_locked(client, names[i], &locked));
    CHECK(!locked);
  }
  redmutex_client_free(client);
}

static void test_lock_and_unlock_on_every_master(void) {
  lock_names_on_every_master(cluster_url());
}

/* One seed is enough: the cluster tells where the other masters are. */
static void test_one_seed_finds_every_master(void) {
  char url[256];
  char *comma;
  snprintf(url, sizeof url, "%s", cluster_url());
  comma = strchr(url, ',');
  if (comma != NULL) *comma = '\0';
  lock_names_on_every_master(url);
}

static void test_second_client_would_block(void) {
  char name[128];
  redmutex_client *a = client_for(cluster_url());
  redmutex_client *b = client_for(cluster_url());
  redmutex_guard *held = NULL;
  redmutex_guard *other = (redmutex_guard *)&other; /* a sentinel: must stay untouched */
  CHECK(a != NULL && b != NULL);
  unique_name(name, sizeof name, "would-block");

  CHECK_OK(redmutex_lock(a, name, 30000, 0, &held));
  CHECK_RESULT(redmutex_lock(b, name, 30000, 0, &other), REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK(other == (redmutex_guard *)&other);
  CHECK(last_error_contains("would block"));
  CHECK_RESULT(redmutex_lock(b, name, 30000, 200, &other), REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK(other == (redmutex_guard *)&other);
  CHECK(redmutex_guard_is_held(held));

  CHECK_OK(redmutex_unlock(held));
  /* b waited, so the lock is reserved for waiters for a moment: take it as a waiter. */
  other = NULL;
  CHECK_OK(redmutex_lock(b, name, 30000, 1000, &other));
  CHECK_OK(redmutex_unlock(other));
  redmutex_client_free(a);
  redmutex_client_free(b);
}

static void test_fence_increases(void) {
  char name[128];
  redmutex_client *clients[2];
  redmutex_guard *guard;
  uint64_t previous = 0, fence;
  int i;
  clients[0] = client_for(cluster_url());
  clients[1] = client_for(cluster_url());
  CHECK(clients[0] != NULL && clients[1] != NULL);
  unique_name(name, sizeof name, "fence");

  for (i = 0; i < 6; i++) {
    guard = NULL;
    CHECK_OK(redmutex_lock(clients[i % 2], name, 30000, 1000, &guard));
    fence = redmutex_guard_fence(guard);
    CHECK(fence > previous);
    previous = fence;
    CHECK_OK(redmutex_unlock(guard));
  }
  redmutex_client_free(clients[0]);
  redmutex_client_free(clients[1]);
}

/* Names with a hash tag, and with a stray '}' (whose companion keys need a tag of their
 * own in the same slot): every key a lock touches must share one slot, or the cluster
 * refuses the script with CROSSSLOT. */
static void test_names_with_braces(void) {
  const char *suffixes[] = {"{user:1}:lock", "a}b", "}", "{}x", "x{", "{a}{b}"};
  char name[128];
  redmutex_client *client = client_for(cluster_url());
  redmutex_guard *guard;
  size_t i;
  CHECK(client != NULL);
  for (i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
    unique_name(name, sizeof name, suffixes[i]);
    guard = NULL;
    CHECK_OK(redmutex_lock(client, name, 30000, 0, &guard));
    CHECK(redmutex_guard_fence(guard) >= 1);
    CHECK_OK(redmutex_unlock(guard));
  }
  redmutex_client_free(client);
}

static void test_malformed_cluster_urls(void) {
  const char *bad[] = {
      "redis+cluster://h:0",          /* port 0 */
      "redis+cluster://h/1",          /* a database: a cluster has only 0 */
      "rediss+cluster://h:1#verify",  /* a fragment other than #insecure */
      "redis+cluster://",             /* no host */
      "redis+cluster://h:1,",         /* an empty seed */
      "redis+cluster://h:99999",      /* port out of range */
      "redis+cluster://h:1?timeout=1", /* a query */
      "redis+cluster://u:hunter2@h/2",
  };
  redmutex_client *client;
  const char *urls[1];
  size_t i;
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    client = (redmutex_client *)&client; /* a sentinel: must stay untouched */
    urls[0] = bad[i];
    CHECK_RESULT(redmutex_client_new(urls, 1, &client), REDMUTEX_RESULT_INVALID_ARGUMENT);
    CHECK(client == (redmutex_client *)&client);
    if (!last_error_contains("Redis Cluster")) {
      fprintf(stderr, "%s: %s\n", bad[i], last_error());
      CHECK(last_error_contains("Redis Cluster"));
    }
    CHECK(!last_error_contains("hunter2"));
  }
}

/* One master's connections that wait now (blocked in BLPOP, or listening on sharded
 * channels, from CLIENT LIST through redis-cli), and the waits they serve (one per BLPOP,
 * one per channel). -1 connections when redis-cli could not say. */
static int waiting_on(int port, int *waits) {
  char cmd[128], line[1024];
  int connections = -1;
  FILE *out;
  snprintf(cmd, sizeof cmd, "redis-cli -h 127.0.0.1 -p %d CLIENT LIST", port);
  *waits = 0;
  out = popen(cmd, "r");
  if (out == NULL) return -1;
  connections = 0;
  while (fgets(line, sizeof line, out) != NULL) {
    const char *ssub = strstr(line, " ssub=");
    const char *flags = strstr(line, " flags=");
    int channels = ssub != NULL ? atoi(ssub + 6) : 0;
    bool blocked = strstr(line, " cmd=blpop") != NULL && flags != NULL &&
                   memchr(flags + 7, 'b', strcspn(flags + 7, " ")) != NULL;
    if (blocked || channels > 0) {
      connections++;
      *waits += (blocked ? 1 : 0) + channels;
    }
  }
  pclose(out);
  return connections;
}

struct cluster_waiter {
  redmutex_client *client;
  const char *name;
  redmutex_result result;
};

static void *wait_for_name(void *p) {
  struct cluster_waiter *w = p;
  redmutex_guard *guard = NULL;
  w->result = redmutex_lock(w->client, w->name, 30000, 60000, &guard);
  if (w->result == REDMUTEX_RESULT_OK) w->result = redmutex_unlock(guard);
  return NULL;
}

/* Twenty threads of one client wait on names spread over the three masters (a Cluster
 * refuses one BLPOP over keys of several slots): each master sees at most two of the
 * client's connections waiting (one blocked in BLPOP, one listening on sharded pub/sub for
 * the others), and every waiter gets its lock once its name is released. */
static void test_waiting_threads_share_one_connection_per_master(void) {
  static char names[SPREAD_NAMES][96];
  static struct cluster_waiter waiters[SPREAD_NAMES];
  redmutex_guard *held[SPREAD_NAMES];
  pthread_t threads[SPREAD_NAMES];
  int ports[3], n_ports = 0, i, total = 0, waits;
  const char *p = strstr(cluster_url(), "://");
  redmutex_client *holder = client_for(cluster_url());
  redmutex_client *waiter = client_for(cluster_url());
  double until;
  CHECK(holder != NULL && waiter != NULL && p != NULL);
  for (p += 3; n_ports < 3 && (p = strchr(p, ':')) != NULL; p++) ports[n_ports++] = atoi(p + 1);
  CHECK(n_ports == 3);
  CHECK(spread_names(names) == SPREAD_NAMES);
  for (i = 0; i < SPREAD_NAMES; i++) {
    held[i] = NULL;
    CHECK_OK(redmutex_lock(holder, names[i], 3600000, 0, &held[i]));
  }
  for (i = 0; i < SPREAD_NAMES; i++) {
    waiters[i] = (struct cluster_waiter){waiter, names[i], REDMUTEX_RESULT_OK};
    CHECK(pthread_create(&threads[i], NULL, wait_for_name, &waiters[i]) == 0);
  }
  until = now_ms() + 20000;
  while (total < SPREAD_NAMES && now_ms() < until) {
    sleep_ms(50);
    for (total = 0, i = 0; i < 3; i++) {
      CHECK(waiting_on(ports[i], &waits) >= 0);
      total += waits;
    }
  }
  CHECK(total >= SPREAD_NAMES);
  for (i = 0; i < 3; i++) {
    int connections = waiting_on(ports[i], &waits);
    printf("     master %d: %d connections serve %d waits\n", ports[i], connections, waits);
    CHECK(connections <= 2);
  }
  for (i = 0; i < SPREAD_NAMES; i++) CHECK_OK(redmutex_unlock(held[i]));
  for (i = 0; i < SPREAD_NAMES; i++) {
    pthread_join(threads[i], NULL);
    CHECK(waiters[i].result == REDMUTEX_RESULT_OK);
  }
  redmutex_client_free(waiter);
  redmutex_client_free(holder);
  /* The client's end ends its waiting connections: none is left listening (the threads that
   * served them are done, before the program's end counts what is still allocated). */
  until = now_ms() + 5000;
  do {
    sleep_ms(20);
    for (total = 0, i = 0; i < 3; i++) total += waiting_on(ports[i], &waits);
  } while (total > 0 && now_ms() < until);
  CHECK(total == 0);
}

int main(void) {
  RUN(test_key_slot_matches_redis);
  RUN(test_lock_and_unlock_on_every_master);
  RUN(test_one_seed_finds_every_master);
  RUN(test_second_client_would_block);
  RUN(test_fence_increases);
  RUN(test_names_with_braces);
  RUN(test_malformed_cluster_urls);
  RUN(test_waiting_threads_share_one_connection_per_master);
  return TESTING_SUMMARY();
}
