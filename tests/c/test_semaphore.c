/* The semaphore through the C API: at most N holders of a name, each with its own guard. */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "redmutex.h"
#include "support.h"
#include "testing.h"

/* A guard pointer a failed call must leave alone. */
#define UNTOUCHED(p) ((redmutex_guard *)&(p))

static void test_at_most_n_holders(void) {
  char name[128];
  redmutex_client *a = test_client();
  redmutex_client *b = test_client();
  redmutex_guard *held[3] = {NULL, NULL, NULL};
  redmutex_guard *extra = UNTOUCHED(extra);
  redmutex_guard *next = NULL;
  uint32_t permits = 7;
  size_t count = 7;
  uint64_t fence = 7;
  int i;
  CHECK(a != NULL && b != NULL);
  unique_name(name, sizeof name, "sem-n");

  CHECK_OK(redmutex_semaphore_status(a, name, &permits, &count, &fence));
  CHECK(permits == 0 && count == 0 && fence == 0);

  for (i = 0; i < 3; i++) {
    CHECK_OK(redmutex_semaphore_acquire(i % 2 ? a : b, name, 3, 30000, 0, &held[i]));
    CHECK(held[i] != NULL && redmutex_guard_is_held(held[i]));
  }
  CHECK_RESULT(redmutex_semaphore_acquire(a, name, 3, 30000, 0, &extra),
               REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK(extra == UNTOUCHED(extra));
  CHECK_OK(redmutex_semaphore_status(a, name, &permits, &count, &fence));
  CHECK(permits == 3 && count == 3 && fence == redmutex_guard_fence(held[2]));
  CHECK_RESULT(redmutex_semaphore_acquire_bytes(b, (const uint8_t *)name, strlen(name), 3, 30000,
                                                200, &extra),
               REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK(extra == UNTOUCHED(extra));
  /* A mutex of the same name is another lock: it is not counted among the permits. */
  CHECK_OK(redmutex_lock(a, name, 30000, 0, &next));
  CHECK_OK(redmutex_unlock(next));
  next = NULL;

  /* Releasing one permit frees exactly one. */
  CHECK_OK(redmutex_unlock(held[1]));
  held[1] = NULL;
  CHECK_OK(redmutex_semaphore_acquire(b, name, 3, 30000, 1000, &next));
  CHECK_RESULT(redmutex_semaphore_acquire(a, name, 3, 30000, 0, &extra),
               REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK(extra == UNTOUCHED(extra));

  CHECK_OK(redmutex_unlock(next));
  CHECK_OK(redmutex_unlock(held[0]));
  CHECK_OK(redmutex_semaphore_status_bytes(b, (const uint8_t *)name, strlen(name), &permits,
                                           &count, &fence));
  CHECK(permits == 3 && count == 1);
  CHECK_OK(redmutex_unlock(held[2]));
  CHECK_OK(redmutex_semaphore_status(b, name, &permits, &count, &fence));
  CHECK(permits == 0 && count == 0 && fence >= 5);
  CHECK_RESULT(redmutex_semaphore_status(b, NULL, &permits, &count, &fence),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_semaphore_status(b, name, &permits, NULL, &fence),
               REDMUTEX_RESULT_NULL_PARAMETER);
  redmutex_client_free(a);
  redmutex_client_free(b);
}

static void test_fences_strictly_increase(void) {
  char name[128];
  redmutex_client *client = test_client();
  redmutex_guard *g[4] = {NULL, NULL, NULL, NULL};
  uint64_t last = 0;
  int i;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "sem-fence");

  for (i = 0; i < 4; i++) {
    CHECK_OK(redmutex_semaphore_acquire(client, name, 2, 30000, 1000, &g[i]));
    CHECK(redmutex_guard_fence(g[i]) > last);
    last = redmutex_guard_fence(g[i]);
    /* Two held at once, then one released before the next: both ways the fence grows. */
    if (i % 2 == 1) {
      CHECK_OK(redmutex_unlock(g[i - 1]));
      CHECK_OK(redmutex_unlock(g[i]));
    }
  }
  redmutex_client_free(client);
}

static void test_mismatched_count_is_refused_by_name(void) {
  char name[128];
  char want[512];
  redmutex_client *client = test_client();
  redmutex_guard *held = NULL;
  redmutex_guard *other = UNTOUCHED(other);
  redmutex_guard *after = NULL;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "sem-mismatch");
  snprintf(want, sizeof want,
           "the semaphore \"%s\" is held with 2 permits, but this call asked for 3; every user "
           "of one name must give the same count",
           name);

  CHECK_OK(redmutex_semaphore_acquire(client, name, 2, 30000, 0, &held));
  CHECK_RESULT(redmutex_semaphore_acquire(client, name, 3, 30000, 0, &other),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK(other == UNTOUCHED(other));
  CHECK(last_error_contains(want));
  /* Nothing was taken: one permit of the two is still free, and only one. */
  CHECK_OK(redmutex_semaphore_acquire(client, name, 2, 30000, 0, &after));
  CHECK_RESULT(redmutex_semaphore_acquire(client, name, 2, 30000, 0, &other),
               REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK_OK(redmutex_unlock(after));
  CHECK_OK(redmutex_unlock(held));
  /* Once no permit is held, another count may start afresh. */
  after = NULL;
  CHECK_OK(redmutex_semaphore_acquire(client, name, 3, 30000, 1000, &after));
  CHECK_OK(redmutex_unlock(after));
  redmutex_client_free(client);
}

static void test_bad_arguments_are_refused_and_nothing_is_held(void) {
  char name[128];
  char long_name[600];
  const char bad_utf8[] = {'s', 'e', 'm', (char)0xff, 0};
  redmutex_client *client = test_client();
  redmutex_lock_options *options = NULL;
  redmutex_guard *g = UNTOUCHED(g);
  redmutex_guard *only = NULL;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "sem-bad");
  memset(long_name, 'x', 513);
  long_name[513] = '\0';

  CHECK_RESULT(redmutex_semaphore_acquire(client, name, 0, 30000, 0, &g),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK(last_error_contains("a semaphore must have 1 to 1024 permits, got 0"));
  CHECK_RESULT(redmutex_semaphore_acquire(client, name, 1025, 30000, 0, &g),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK(last_error_contains("a semaphore must have 1 to 1024 permits, got 1025"));
  CHECK_RESULT(redmutex_semaphore_acquire(client, long_name, 2, 30000, 0, &g),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK(last_error_contains("512"));
  CHECK_RESULT(redmutex_semaphore_acquire_bytes(client, (const uint8_t *)long_name, 513, 2, 30000,
                                                0, &g),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(redmutex_semaphore_acquire(client, "", 2, 30000, 0, &g),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(redmutex_semaphore_acquire(client, name, 2, 0, 0, &g),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(redmutex_semaphore_acquire(client, name, 2, 30000, -2, &g),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK(last_error_contains("wait_ms"));
  CHECK_RESULT(redmutex_semaphore_acquire(client, bad_utf8, 2, 30000, 0, &g),
               REDMUTEX_RESULT_INVALID_UTF8);
  CHECK(last_error_contains("`name` is not valid UTF-8"));
  CHECK_RESULT(redmutex_semaphore_acquire(NULL, name, 2, 30000, 0, &g),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK(last_error_contains("`client` is NULL"));
  CHECK_RESULT(redmutex_semaphore_acquire(client, NULL, 2, 30000, 0, &g),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK(last_error_contains("`name` is NULL"));
  CHECK_RESULT(redmutex_semaphore_acquire(client, name, 2, 30000, 0, NULL),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK(last_error_contains("`out_guard` is NULL"));
  CHECK_RESULT(redmutex_semaphore_acquire_bytes(client, NULL, 3, 2, 30000, 0, &g),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_semaphore_acquire_with_options(client, (const uint8_t *)name,
                                                       strlen(name), 2, NULL, 0, &g),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK(last_error_contains("`options` is NULL"));
  CHECK_OK(redmutex_lock_options_new(&options));
  CHECK_RESULT(redmutex_semaphore_acquire_with_options(client, (const uint8_t *)name,
                                                       strlen(name), 1025, options, 0, &g),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  redmutex_lock_options_free(options);
  CHECK(g == UNTOUCHED(g));

  /* None of them took a permit: a semaphore of one permit is free at once. */
  CHECK_OK(redmutex_semaphore_acquire(client, name, 1, 30000, 0, &only));
  CHECK_RESULT(redmutex_semaphore_acquire(client, name, 1, 30000, 0, &g),
               REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK_OK(redmutex_unlock(only));
  redmutex_client_free(client);
}

/* Over several independent masters a counting semaphore is unsafe, and refused. */
static void test_several_masters_are_refused(void) {
  char storage[1024];
  const char *urls[5];
  size_t n = test_urls5(storage, sizeof storage, urls);
  redmutex_client *client = NULL;
  redmutex_guard *g = UNTOUCHED(g);
  CHECK(n == 5);
  CHECK((client = client_of(urls, n)) != NULL);
  CHECK_RESULT(redmutex_semaphore_acquire(client, "redmutex-c-test:sem-redlock", 2, 30000, 0, &g),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK(last_error_contains("2N-1"));
  CHECK(g == UNTOUCHED(g));
  {
    uint32_t permits = 0;
    size_t held = 0;
    uint64_t fence = 0;
    CHECK_RESULT(redmutex_semaphore_status(client, "redmutex-c-test:sem-redlock", &permits, &held,
                                           &fence),
                 REDMUTEX_RESULT_INVALID_ARGUMENT);
  }
  redmutex_client_free(client);
}

static atomic_int lost_calls;
static void count_lost(void *user_data) {
  (void)user_data;
  atomic_fetch_add(&lost_calls, 1);
}

/* Every guard function applies to a permit. */
static void test_guard_functions_apply_to_a_permit(void) {
  char name[128];
  char token[256];
  size_t n = 0;
  bool lost = true;
  redmutex_client *client = test_client();
  redmutex_lock_options *options = NULL;
  redmutex_guard *g = NULL;
  redmutex_guard *short_lived = NULL;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "sem-guard");

  CHECK_OK(redmutex_semaphore_acquire(client, name, 2, 30000, 0, &g));
  CHECK_OK(redmutex_guard_check(g));
  CHECK(redmutex_guard_valid_ms(g) > 25000 && redmutex_guard_valid_ms(g) <= 30000);
  CHECK_OK(redmutex_guard_token(g, token, sizeof token, &n));
  CHECK(n > 0 && strlen(token) == n && strchr(token, ':') != NULL);
  CHECK_OK(redmutex_guard_extend(g, 60000));
  CHECK(redmutex_guard_valid_ms(g) > 55000);
  CHECK(redmutex_guard_renewals(g) >= 1);
  CHECK_OK(redmutex_guard_wait_lost(g, 10, &lost));
  CHECK(!lost);
  CHECK_OK(redmutex_guard_on_lost(g, count_lost, NULL));
  CHECK_OK(redmutex_guard_release(g));
  CHECK(!redmutex_guard_is_held(g));
  CHECK_RESULT(redmutex_guard_release(g), REDMUTEX_RESULT_NOT_HELD);
  redmutex_guard_free(g);
  CHECK(atomic_load(&lost_calls) == 0);

  /* A permit nobody renews is lost after its TTL, and says so. */
  CHECK_OK(redmutex_lock_options_new(&options));
  CHECK_OK(redmutex_lock_options_set_ttl(options, 300));
  CHECK_OK(redmutex_lock_options_set_auto_renew(options, false));
  CHECK_OK(redmutex_semaphore_acquire_with_options(client, (const uint8_t *)name, strlen(name), 2,
                                                   options, 1000, &short_lived));
  redmutex_lock_options_free(options);
  CHECK_OK(redmutex_guard_on_lost(short_lived, count_lost, NULL));
  CHECK_OK(redmutex_guard_wait_lost(short_lived, 5000, &lost));
  CHECK(lost);
  for (n = 0; n < 100 && atomic_load(&lost_calls) == 0; n++) sleep_ms(10);
  CHECK(atomic_load(&lost_calls) == 1);
  CHECK_RESULT(redmutex_guard_check(short_lived), REDMUTEX_RESULT_LOST);
  CHECK_RESULT(redmutex_unlock(short_lived), REDMUTEX_RESULT_LOST);
  redmutex_client_free(client);
}

int main(void) {
  RUN(test_at_most_n_holders);
  RUN(test_fences_strictly_increase);
  RUN(test_mismatched_count_is_refused_by_name);
  RUN(test_bad_arguments_are_refused_and_nothing_is_held);
  RUN(test_several_masters_are_refused);
  RUN(test_guard_functions_apply_to_a_permit);
  return TESTING_SUMMARY();
}
