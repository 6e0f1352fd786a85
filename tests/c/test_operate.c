/* redmutex_list and redmutex_force_unlock: a held lock is listed with its kind, holder, lease
 * and fence, and nothing else is; a holder stuck with a 1 h lease is broken, its waiter gets
 * the lock at once with a larger fence, and the stuck holder's release no longer touches it;
 * bad arguments get their documented codes. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "redmutex.h"
#include "support.h"
#include "testing.h"

#define HOUR_MS 3600000

/* A copy of what one redmutex_list callback saw (first hold only; the tests take one each). */
struct seen_lock {
  char name[160];
  size_t holds;
  redmutex_hold_kind kind;
  char holder[256];
  int64_t ttl_ms;
  size_t hold_nodes;
  uint64_t fence;
  uint64_t waiters;
  size_t nodes;
  bool disagree;
};

struct listing {
  struct seen_lock locks[8];
  size_t count;
  /* Stop after this many locks (0: never). */
  size_t stop_after;
};

static int collect(const redmutex_listed_lock *lock, void *user_data) {
  struct listing *l = user_data;
  if (l->count < sizeof l->locks / sizeof l->locks[0]) {
    struct seen_lock *s = &l->locks[l->count];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%.*s", (int)lock->name_len, (const char *)lock->name);
    s->holds = lock->holds_len;
    if (lock->holds_len > 0) {
      s->kind = lock->holds[0].kind;
      snprintf(s->holder, sizeof s->holder, "%.*s", (int)lock->holds[0].holder_len,
               (const char *)lock->holds[0].holder);
      s->ttl_ms = lock->holds[0].ttl_ms;
      s->hold_nodes = lock->holds[0].nodes;
    } else if (lock->holds != NULL) {
      s->holds = SIZE_MAX; /* documented NULL when there is none */
    }
    s->fence = lock->fence;
    s->waiters = lock->waiters;
    s->nodes = lock->nodes;
    s->disagree = lock->disagree;
  }
  l->count++;
  return l->stop_after != 0 && l->count >= l->stop_after;
}

static redmutex_result list(redmutex_client *client, const char *pattern, struct listing *l) {
  memset(l, 0, sizeof *l);
  return redmutex_list(client, pattern, collect, l);
}

static void token_of(redmutex_guard *guard, char *buf, size_t len) {
  size_t n = 0;
  if (redmutex_guard_token(guard, buf, len, &n) != REDMUTEX_RESULT_OK) buf[0] = '\0';
}

struct waiter {
  redmutex_client *client;
  const char *name;
  redmutex_guard *guard;
  redmutex_result result;
  double granted_at;
};

static void *wait_for_lock(void *p) {
  struct waiter *w = p;
  w->result = redmutex_lock(w->client, w->name, 30000, 60000, &w->guard);
  w->granted_at = now_ms();
  return NULL;
}

static void test_a_held_lock_is_listed_with_its_holder(void) {
  char name[128], token[256];
  struct listing l;
  redmutex_client *client = test_client();
  redmutex_guard *guard = NULL;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "listed");

  CHECK_OK(redmutex_lock(client, name, 30000, 0, &guard));
  token_of(guard, token, sizeof token);
  CHECK_OK(list(client, name, &l));
  CHECK(l.count == 1);
  CHECK(strcmp(l.locks[0].name, name) == 0);
  CHECK(l.locks[0].holds == 1);
  CHECK(l.locks[0].kind == REDMUTEX_HOLD_KIND_EXCLUSIVE);
  CHECK(strcmp(redmutex_hold_kind_name(l.locks[0].kind), "exclusive") == 0);
  CHECK(strcmp(l.locks[0].holder, token) == 0);
  CHECK(l.locks[0].ttl_ms > 0 && l.locks[0].ttl_ms <= 30000);
  CHECK(l.locks[0].fence == redmutex_guard_fence(guard));
  CHECK(l.locks[0].waiters == 0);
  CHECK(l.locks[0].nodes == 1 && l.locks[0].hold_nodes == 1 && !l.locks[0].disagree);

  /* Released, it is no longer listed; nor is a name that does not match. */
  CHECK_OK(redmutex_unlock(guard));
  CHECK_OK(list(client, name, &l));
  CHECK(l.count == 0);
  redmutex_client_free(client);
}

static void test_read_holds_and_permits_are_listed_by_kind(void) {
  char prefix[128], pattern[160], rw[160], sem[160];
  struct listing l;
  redmutex_client *client = test_client();
  redmutex_guard *read = NULL, *permit = NULL;
  CHECK(client != NULL);
  unique_name(prefix, sizeof prefix, "kinds");
  snprintf(pattern, sizeof pattern, "%s:*", prefix);
  snprintf(rw, sizeof rw, "%s:a-rw", prefix);
  snprintf(sem, sizeof sem, "%s:b-sem", prefix);

  CHECK_OK(redmutex_read_lock(client, rw, 30000, 0, &read));
  CHECK_OK(redmutex_semaphore_acquire(client, sem, 2, 30000, 0, &permit));
  CHECK_OK(list(client, pattern, &l));
  CHECK(l.count == 2);
  CHECK(strcmp(l.locks[0].name, rw) == 0 && l.locks[0].kind == REDMUTEX_HOLD_KIND_READ);
  CHECK(strcmp(l.locks[1].name, sem) == 0 && l.locks[1].kind == REDMUTEX_HOLD_KIND_PERMIT);
  CHECK(strcmp(redmutex_hold_kind_name(REDMUTEX_HOLD_KIND_READ), "read") == 0);
  CHECK(strcmp(redmutex_hold_kind_name(REDMUTEX_HOLD_KIND_PERMIT), "permit") == 0);

  /* A callback that returns nonzero ends the listing after that lock. */
  memset(&l, 0, sizeof l);
  l.stop_after = 1;
  CHECK_OK(redmutex_list(client, pattern, collect, &l));
  CHECK(l.count == 1);

  CHECK_OK(redmutex_unlock(read));
  CHECK_OK(redmutex_unlock(permit));
  redmutex_client_free(client);
}

/* A holder stuck with a 1 h lease (nothing renews it, as for a killed process) and a waiter
 * behind it: the waiter is listed; the forced unlock removes the one hold, the waiter gets
 * the lock at once with a larger fence, and the stuck holder's own release is refused. */
static void test_force_unlock_breaks_a_stuck_lock_for_its_waiter(void) {
  char name[128], token[256];
  struct listing l;
  redmutex_client *client = test_client();
  redmutex_client *other = test_client();
  redmutex_guard *stuck = NULL;
  struct waiter w = {NULL, NULL, NULL, REDMUTEX_RESULT_PANIC, 0};
  pthread_t thread;
  size_t removed = 99;
  double broken_at;
  int i;
  CHECK(client != NULL && other != NULL);
  unique_name(name, sizeof name, "stuck");

  CHECK_OK(lock_unrenewed(client, name, HOUR_MS, &stuck));
  w.client = other;
  w.name = name;
  CHECK(pthread_create(&thread, NULL, wait_for_lock, &w) == 0);
  for (i = 0; i < 500; i++) {
    CHECK_OK(list(client, name, &l));
    if (l.count == 1 && l.locks[0].waiters > 0) break;
    sleep_ms(20);
  }
  CHECK(l.count == 1 && l.locks[0].waiters > 0);
  CHECK(l.locks[0].ttl_ms > 30000);

  broken_at = now_ms();
  CHECK_OK(redmutex_force_unlock(client, name, &removed));
  CHECK(removed == 1);
  CHECK(pthread_join(thread, NULL) == 0);
  CHECK_RESULT(w.result, REDMUTEX_RESULT_OK);
  /* Woken by the forced release, not by the 1 h lease or a poll. */
  CHECK(w.granted_at - broken_at < 5000);
  CHECK(redmutex_guard_fence(w.guard) > redmutex_guard_fence(stuck));

  token_of(w.guard, token, sizeof token);
  CHECK_OK(list(client, name, &l));
  CHECK(l.count == 1 && l.locks[0].holds == 1 && strcmp(l.locks[0].holder, token) == 0);
  CHECK_RESULT(redmutex_unlock(stuck), REDMUTEX_RESULT_LOST);
  CHECK(redmutex_guard_is_held(w.guard));
  CHECK_OK(redmutex_unlock(w.guard));
  redmutex_client_free(client);
  redmutex_client_free(other);
}

static void test_force_unlock_of_a_free_lock_removes_nothing(void) {
  char name[128];
  struct listing l;
  redmutex_client *client = test_client();
  redmutex_guard *guard = NULL;
  size_t removed = 99;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "free");

  CHECK_OK(lock_unrenewed(client, name, HOUR_MS, &guard));
  CHECK_OK(redmutex_force_unlock_bytes(client, (const uint8_t *)name, strlen(name), &removed));
  CHECK(removed == 1);
  CHECK_OK(list(client, name, &l));
  CHECK(l.count == 0);
  CHECK_OK(redmutex_force_unlock(client, name, &removed));
  CHECK(removed == 0);
  redmutex_guard_free(guard);
  redmutex_client_free(client);
}

/* Five independent masters (Redlock): every node answers and has the hold. */
static void test_redlock_nodes_are_counted(void) {
  char storage[1024], name[128];
  const char *urls[5];
  struct listing l;
  size_t n = test_urls5(storage, sizeof storage, urls);
  redmutex_client *client = client_of(urls, n);
  redmutex_guard *guard = NULL;
  size_t removed = 0;
  CHECK(n == 5 && client != NULL);
  unique_name(name, sizeof name, "redlock");

  CHECK_OK(redmutex_lock(client, name, 30000, 0, &guard));
  CHECK_OK(list(client, name, &l));
  CHECK(l.count == 1 && l.locks[0].nodes == 5 && l.locks[0].hold_nodes == 5);
  CHECK(!l.locks[0].disagree);
  CHECK_OK(redmutex_force_unlock(client, name, &removed));
  CHECK(removed == 1);
  CHECK_RESULT(redmutex_unlock(guard), REDMUTEX_RESULT_LOST);
  redmutex_client_free(client);
}

static void test_bad_arguments_get_their_codes(void) {
  static const uint8_t not_utf8[] = {'a', 0xff, 0};
  uint8_t long_pattern[2049];
  struct listing l;
  redmutex_client *client = test_client();
  size_t removed = 99;
  CHECK(client != NULL);
  memset(long_pattern, '*', sizeof long_pattern);
  memset(&l, 0, sizeof l);

  CHECK_RESULT(redmutex_list(NULL, "*", collect, &l), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK(last_error_contains("client"));
  CHECK_RESULT(redmutex_list(client, NULL, collect, &l), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK(last_error_contains("pattern"));
  CHECK_RESULT(redmutex_list(client, "*", NULL, &l), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK(last_error_contains("callback"));
  CHECK_RESULT(redmutex_list(client, "", collect, &l), REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(redmutex_list(client, (const char *)not_utf8, collect, &l),
               REDMUTEX_RESULT_INVALID_UTF8);
  CHECK_RESULT(redmutex_list_bytes(NULL, long_pattern, 1, collect, &l),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_list_bytes(client, NULL, 1, collect, &l), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_list_bytes(client, long_pattern, 1, NULL, &l),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_list_bytes(client, long_pattern, 0, collect, &l),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(redmutex_list_bytes(client, long_pattern, sizeof long_pattern, collect, &l),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK(l.count == 0);

  CHECK_RESULT(redmutex_force_unlock(NULL, "x", &removed), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_force_unlock(client, NULL, &removed), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_force_unlock(client, "x", NULL), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK(last_error_contains("out_removed"));
  CHECK_RESULT(redmutex_force_unlock(client, "", &removed), REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(redmutex_force_unlock(client, (const char *)not_utf8, &removed),
               REDMUTEX_RESULT_INVALID_UTF8);
  CHECK_RESULT(redmutex_force_unlock_bytes(NULL, long_pattern, 1, &removed),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_force_unlock_bytes(client, NULL, 1, &removed),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_force_unlock_bytes(client, long_pattern, 1, NULL),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_force_unlock_bytes(client, long_pattern, 0, &removed),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(redmutex_force_unlock_bytes(client, long_pattern, 513, &removed),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  /* Outputs are written only on success. */
  CHECK(removed == 99);

  /* The values are stable. */
  CHECK(REDMUTEX_HOLD_KIND_EXCLUSIVE == 0 && REDMUTEX_HOLD_KIND_READ == 1);
  CHECK(REDMUTEX_HOLD_KIND_PERMIT == 2 && REDMUTEX_HOLD_KIND_OTHER == 3);
  CHECK(strcmp(redmutex_hold_kind_name(REDMUTEX_HOLD_KIND_OTHER), "other") == 0);
  CHECK(strcmp(redmutex_hold_kind_name(77), "other") == 0);
  redmutex_client_free(client);
}

int main(void) {
  RUN(test_a_held_lock_is_listed_with_its_holder);
  RUN(test_read_holds_and_permits_are_listed_by_kind);
  RUN(test_force_unlock_breaks_a_stuck_lock_for_its_waiter);
  RUN(test_force_unlock_of_a_free_lock_removes_nothing);
  RUN(test_redlock_nodes_are_counted);
  RUN(test_bad_arguments_get_their_codes);
  return TESTING_SUMMARY();
}
