/* The read-write lock through the C API: many readers or one writer, and the write side is
 * the mutex of the same name. */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "redmutex.h"
#include "support.h"
#include "testing.h"

/* A guard pointer a failed call must leave alone. */
#define UNTOUCHED(p) ((redmutex_guard *)&(p))

static void test_readers_share_and_writers_wait(void) {
  char name[128];
  redmutex_client *a = test_client();
  redmutex_client *b = test_client();
  redmutex_guard *r1 = NULL;
  redmutex_guard *r2 = NULL;
  redmutex_guard *w = UNTOUCHED(w);
  redmutex_guard *r3 = UNTOUCHED(r3);
  bool writer = true;
  size_t readers = 9;
  uint64_t fence = 9;
  CHECK(a != NULL && b != NULL);
  unique_name(name, sizeof name, "rw-share");

  CHECK_OK(redmutex_rwlock_status(a, name, &writer, &readers, &fence));
  CHECK(!writer && readers == 0 && fence == 0);
  CHECK_OK(redmutex_read_lock(a, name, 30000, 0, &r1));
  CHECK_OK(redmutex_read_lock(b, name, 30000, 0, &r2));
  CHECK(redmutex_guard_is_held(r1) && redmutex_guard_is_held(r2));
  CHECK_OK(redmutex_rwlock_status(a, name, &writer, &readers, &fence));
  CHECK(!writer && readers == 2);
  /* A writer waits for both readers. */
  CHECK_RESULT(redmutex_write_lock(b, name, 30000, 0, &w), REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK(w == UNTOUCHED(w));
  CHECK_OK(redmutex_unlock(r1));
  CHECK_RESULT(redmutex_write_lock_bytes(a, (const uint8_t *)name, strlen(name), 30000, 100, &w),
               REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK(w == UNTOUCHED(w));
  CHECK_OK(redmutex_unlock(r2));
  w = NULL;
  CHECK_OK(redmutex_write_lock(a, name, 30000, 1000, &w));
  CHECK_OK(redmutex_rwlock_status_bytes(b, (const uint8_t *)name, strlen(name), &writer,
                                        &readers, &fence));
  CHECK(writer && readers == 0 && fence == redmutex_guard_fence(w));
  CHECK_RESULT(redmutex_rwlock_status(b, name, NULL, &readers, &fence),
               REDMUTEX_RESULT_NULL_PARAMETER);

  /* While the writer holds it, readers and other writers wait. */
  CHECK_RESULT(redmutex_read_lock(b, name, 30000, 0, &r3), REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK_RESULT(redmutex_read_lock(b, name, 30000, 100, &r3), REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK(r3 == UNTOUCHED(r3));
  CHECK_RESULT(redmutex_write_lock(b, name, 30000, 0, &r3), REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK(r3 == UNTOUCHED(r3));
  CHECK_OK(redmutex_unlock(w));
  r3 = NULL;
  CHECK_OK(redmutex_read_lock(b, name, 30000, 1000, &r3));
  CHECK_OK(redmutex_unlock(r3));
  redmutex_client_free(a);
  redmutex_client_free(b);
}

/* redmutex_lock on a name is the write side of that name's read-write lock. */
static void test_a_plain_lock_is_the_write_side(void) {
  char name[128];
  redmutex_client *client = test_client();
  redmutex_guard *m = NULL;
  redmutex_guard *r = UNTOUCHED(r);
  redmutex_guard *w = UNTOUCHED(w);
  bool locked = false;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "rw-mutex");

  CHECK_OK(redmutex_lock(client, name, 30000, 0, &m));
  CHECK_RESULT(redmutex_read_lock(client, name, 30000, 0, &r), REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK_RESULT(redmutex_write_lock(client, name, 30000, 0, &w), REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK(r == UNTOUCHED(r) && w == UNTOUCHED(w));
  CHECK_OK(redmutex_unlock(m));

  r = NULL;
  m = UNTOUCHED(m);
  CHECK_OK(redmutex_read_lock(client, name, 30000, 1000, &r));
  CHECK_RESULT(redmutex_lock(client, name, 30000, 0, &m), REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK(m == UNTOUCHED(m));
  CHECK_OK(redmutex_unlock(r));

  /* A write hold is the lock key itself: redmutex_is_locked sees it. */
  w = NULL;
  CHECK_OK(redmutex_write_lock(client, name, 30000, 1000, &w));
  CHECK_OK(redmutex_is_locked(client, name, &locked));
  CHECK(locked);
  CHECK_OK(redmutex_unlock(w));
  redmutex_client_free(client);
}

/* Write fences strictly increase; a read hold carries the last write's fence. */
static void test_fences(void) {
  char name[128];
  redmutex_client *client = test_client();
  redmutex_guard *w = NULL;
  redmutex_guard *r = NULL;
  redmutex_guard *m = NULL;
  uint64_t first;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "rw-fence");

  CHECK_OK(redmutex_read_lock(client, name, 30000, 0, &r));
  CHECK(redmutex_guard_fence(r) == 0);
  CHECK_OK(redmutex_unlock(r));
  CHECK_OK(redmutex_write_lock(client, name, 30000, 1000, &w));
  first = redmutex_guard_fence(w);
  CHECK(first >= 1);
  CHECK_OK(redmutex_unlock(w));
  r = NULL;
  CHECK_OK(redmutex_read_lock(client, name, 30000, 1000, &r));
  CHECK(redmutex_guard_fence(r) == first);
  CHECK_OK(redmutex_unlock(r));
  CHECK_OK(redmutex_lock(client, name, 30000, 1000, &m));
  CHECK(redmutex_guard_fence(m) > first);
  CHECK_OK(redmutex_unlock(m));
  w = NULL;
  CHECK_OK(redmutex_write_lock(client, name, 30000, 1000, &w));
  CHECK(redmutex_guard_fence(w) > first + 1);
  CHECK_OK(redmutex_unlock(w));
  redmutex_client_free(client);
}

static void test_bad_arguments_are_refused(void) {
  char name[128];
  char long_name[600];
  const char bad_utf8[] = {'r', 'w', (char)0xc3, 0};
  redmutex_client *client = test_client();
  redmutex_guard *g = UNTOUCHED(g);
  redmutex_guard *w = NULL;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "rw-bad");
  memset(long_name, 'y', 513);
  long_name[513] = '\0';

  CHECK_RESULT(redmutex_read_lock(client, long_name, 30000, 0, &g),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(redmutex_write_lock(client, long_name, 30000, 0, &g),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(redmutex_read_lock_bytes(client, (const uint8_t *)long_name, 513, 30000, 0, &g),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK(last_error_contains("at most 512 bytes"));
  CHECK_RESULT(redmutex_read_lock(client, "", 30000, 0, &g), REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(redmutex_write_lock(client, name, 5, 0, &g), REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(redmutex_read_lock(client, name, 30000, -7, &g), REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(redmutex_read_lock(client, bad_utf8, 30000, 0, &g), REDMUTEX_RESULT_INVALID_UTF8);
  CHECK_RESULT(redmutex_write_lock(client, bad_utf8, 30000, 0, &g), REDMUTEX_RESULT_INVALID_UTF8);
  CHECK_RESULT(redmutex_read_lock(NULL, name, 30000, 0, &g), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_write_lock(client, NULL, 30000, 0, &g), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_read_lock(client, name, 30000, 0, NULL), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_write_lock_with_options(client, (const uint8_t *)name, strlen(name), NULL,
                                                0, &g),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_read_lock_with_options(client, (const uint8_t *)name, strlen(name), NULL,
                                               0, &g),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK(g == UNTOUCHED(g));
  /* None of them holds anything: the write side is free at once. */
  CHECK_OK(redmutex_write_lock(client, name, 30000, 0, &w));
  CHECK_OK(redmutex_unlock(w));
  redmutex_client_free(client);
}

/* Every guard function applies to read and write holds. */
static void test_guard_functions_apply_to_both_kinds(void) {
  char name[128];
  char token[256];
  size_t n = 0;
  bool lost = true;
  int kind;
  redmutex_client *client = test_client();
  redmutex_lock_options *options = NULL;
  CHECK(client != NULL);
  CHECK_OK(redmutex_lock_options_new(&options));
  CHECK_OK(redmutex_lock_options_set_ttl(options, 20000));

  for (kind = 0; kind < 2; kind++) {
    redmutex_guard *g = NULL;
    redmutex_guard *gone = NULL;
    unique_name(name, sizeof name, kind ? "rw-guard-write" : "rw-guard-read");
    if (kind) {
      CHECK_OK(redmutex_write_lock_with_options(client, (const uint8_t *)name, strlen(name),
                                                options, 0, &g));
    } else {
      CHECK_OK(redmutex_read_lock_with_options(client, (const uint8_t *)name, strlen(name),
                                               options, 0, &g));
    }
    CHECK(redmutex_guard_is_held(g));
    CHECK_OK(redmutex_guard_check(g));
    CHECK(redmutex_guard_valid_ms(g) > 15000 && redmutex_guard_valid_ms(g) <= 20000);
    CHECK_OK(redmutex_guard_token(g, token, sizeof token, &n));
    CHECK(n > 0 && strlen(token) == n);
    CHECK_OK(redmutex_guard_extend(g, 40000));
    CHECK(redmutex_guard_valid_ms(g) > 35000);
    CHECK(redmutex_guard_renewals(g) >= 1);
    CHECK_OK(redmutex_guard_wait_lost(g, 10, &lost));
    CHECK(!lost);
    CHECK_OK(redmutex_guard_release(g));
    CHECK(!redmutex_guard_is_held(g));
    CHECK_RESULT(redmutex_guard_check(g), REDMUTEX_RESULT_NOT_HELD);
    CHECK_OK(redmutex_guard_wait_lost(g, 1000, &lost));
    CHECK(!lost);
    redmutex_guard_free(g);
    /* Released: the other kind is granted at once. */
    if (kind) {
      CHECK_OK(redmutex_read_lock(client, name, 30000, 1000, &gone));
    } else {
      CHECK_OK(redmutex_write_lock(client, name, 30000, 1000, &gone));
    }
    /* redmutex_guard_free releases too. */
    redmutex_guard_free(gone);
    gone = NULL;
    CHECK_OK(redmutex_lock(client, name, 30000, 1000, &gone));
    CHECK_OK(redmutex_unlock(gone));
  }
  redmutex_lock_options_free(options);
  redmutex_client_free(client);
}

/* Over five independent masters a read and a write hold each need a majority. */
static void test_majorities_exclude_each_other(void) {
  char storage[1024];
  char name[128];
  const char *urls[5];
  size_t n = test_urls5(storage, sizeof storage, urls);
  redmutex_client *client = NULL;
  redmutex_guard *r1 = NULL;
  redmutex_guard *r2 = NULL;
  redmutex_guard *w = UNTOUCHED(w);
  CHECK(n == 5);
  CHECK((client = client_of(urls, n)) != NULL);
  unique_name(name, sizeof name, "rw-redlock");

  CHECK_OK(redmutex_read_lock(client, name, 30000, 0, &r1));
  CHECK_OK(redmutex_read_lock(client, name, 30000, 0, &r2));
  CHECK_RESULT(redmutex_write_lock(client, name, 30000, 0, &w), REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK(w == UNTOUCHED(w));
  CHECK_OK(redmutex_unlock(r1));
  CHECK_OK(redmutex_unlock(r2));
  w = NULL;
  CHECK_OK(redmutex_write_lock(client, name, 30000, 1000, &w));
  CHECK_OK(redmutex_unlock(w));
  redmutex_client_free(client);
}

int main(void) {
  RUN(test_readers_share_and_writers_wait);
  RUN(test_a_plain_lock_is_the_write_side);
  RUN(test_fences);
  RUN(test_bad_arguments_are_refused);
  RUN(test_guard_functions_apply_to_both_kinds);
  RUN(test_majorities_exclude_each_other);
  return TESTING_SUMMARY();
}
