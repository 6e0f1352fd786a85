/* A lock that is lost: reported through the on-lost callback, redmutex_guard_is_held,
 * redmutex_guard_check, redmutex_guard_wait_lost and redmutex_unlock. Losing it from C
 * without a Redis client: a short lease with auto-renew off simply runs out. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redmutex.h"
#include "support.h"
#include "testing.h"

struct lost_flag {
  atomic_int calls;
  uint32_t magic; /* proves the callback got our user_data */
};

static void on_lost(void *user_data) {
  struct lost_flag *flag = user_data;
  if (flag->magic == 0x5eed) atomic_fetch_add(&flag->calls, 1);
}

static void test_lost_lock_is_reported_by_callback_and_is_held(void) {
  char name[128];
  redmutex_client *client = test_client();
  redmutex_client *other = test_client();
  redmutex_guard *guard = NULL;
  redmutex_guard *next = NULL;
  struct lost_flag flag = {0, 0x5eed};
  int waited;
  bool lost = false;
  CHECK(client != NULL && other != NULL);
  unique_name(name, sizeof name, "lost");

  /* Long enough for the next three calls to come before the loss under valgrind on a busy
   * machine (300 ms was not, once). */
  CHECK_OK(lock_unrenewed(client, name, 1000, &guard));
  CHECK(redmutex_guard_is_held(guard));
  CHECK_OK(redmutex_guard_on_lost(guard, on_lost, &flag));
  CHECK(atomic_load(&flag.calls) == 0);

  /* The renew thread calls back once the lease is over; wait for it, boundedly. */
  for (waited = 0; atomic_load(&flag.calls) == 0 && waited < 5000; waited += 10) sleep_ms(10);
  CHECK(atomic_load(&flag.calls) == 1);
  CHECK(!redmutex_guard_is_held(guard));
  CHECK_RESULT(redmutex_guard_check(guard), REDMUTEX_RESULT_LOST);
  /* The message says why. */
  CHECK(strcmp(last_error(), "lost: its TTL ran out (auto-renew is off)") == 0);
  CHECK(redmutex_guard_valid_ms(guard) == 0);
  CHECK_OK(redmutex_guard_wait_lost(guard, 0, &lost));
  CHECK(lost);
  /* Extending never brings a lost lock back. */
  CHECK_RESULT(redmutex_guard_extend(guard, 30000), REDMUTEX_RESULT_LOST);

  /* Someone else takes it. The guard counts itself lost a little before the key expires in
   * Redis (the grant's round trip and a clock-drift allowance), so wait for that moment. */
  CHECK_OK(redmutex_lock(other, name, 30000, 2000, &next));
  CHECK_RESULT(redmutex_unlock(guard), REDMUTEX_RESULT_LOST);
  /* The late unlock did not touch the new holder's lock. */
  CHECK(redmutex_guard_is_held(next));
  CHECK_OK(redmutex_unlock(next));
  sleep_ms(50);
  CHECK(atomic_load(&flag.calls) == 1);
  redmutex_client_free(client);
  redmutex_client_free(other);
}

static void test_callback_registered_after_the_loss_runs_at_once(void) {
  char name[128];
  redmutex_client *client = test_client();
  redmutex_guard *guard = NULL;
  struct lost_flag flag = {0, 0x5eed};
  bool lost = false;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "lost-late");

  CHECK_OK(lock_unrenewed(client, name, 100, &guard));
  CHECK_OK(redmutex_guard_wait_lost(guard, 5000, &lost));
  CHECK(lost);
  CHECK_OK(redmutex_guard_on_lost(guard, on_lost, &flag));
  CHECK(atomic_load(&flag.calls) == 1);
  redmutex_guard_free(guard);
  redmutex_client_free(client);
}

static void test_no_callback_after_unlock(void) {
  char name[128];
  redmutex_client *client = test_client();
  redmutex_guard *guard = NULL;
  struct lost_flag flag = {0, 0x5eed};
  CHECK(client != NULL);
  unique_name(name, sizeof name, "unlocked-in-time");

  CHECK_OK(lock_unrenewed(client, name, 300, &guard));
  CHECK_OK(redmutex_guard_on_lost(guard, on_lost, &flag));
  CHECK_OK(redmutex_unlock(guard));
  sleep_ms(600); /* well past the lease */
  CHECK(atomic_load(&flag.calls) == 0);
  redmutex_client_free(client);
}

static void test_no_callback_after_guard_free(void) {
  char name[128];
  redmutex_client *client = test_client();
  redmutex_guard *guard = NULL;
  struct lost_flag flag = {0, 0x5eed};
  CHECK(client != NULL);
  unique_name(name, sizeof name, "freed-in-time");

  CHECK_OK(lock_unrenewed(client, name, 300, &guard));
  CHECK_OK(redmutex_guard_on_lost(guard, on_lost, &flag));
  redmutex_guard_free(guard);
  sleep_ms(600);
  CHECK(atomic_load(&flag.calls) == 0);
  redmutex_client_free(client);
}

static void test_wait_lost_times_out_while_held(void) {
  char name[128];
  redmutex_client *client = test_client();
  redmutex_guard *guard = NULL;
  bool lost = true;
  double started;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "still-held");

  CHECK_OK(redmutex_lock(client, name, 30000, 0, &guard));
  started = now_ms();
  CHECK_OK(redmutex_guard_wait_lost(guard, 200, &lost));
  CHECK(!lost);
  CHECK(now_ms() - started >= 190);
  CHECK(redmutex_guard_is_held(guard));
  CHECK_OK(redmutex_unlock(guard));
  redmutex_client_free(client);
}

/* A key that vanished while held (an operator's DEL, an eviction, FLUSHALL) is a loss, never a
 * clean release: redmutex_unlock answers REDMUTEX_RESULT_LOST and says which node had it
 * missing. The key is deleted behind the library's back with redis-cli. */
static void test_unlock_of_a_key_that_vanished_is_lost(void) {
  char name[128];
  char command[512];
  redmutex_client *client = test_client();
  redmutex_guard *guard = NULL;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "vanished");
  CHECK_OK(redmutex_lock(client, name, 30000, 0, &guard));
  snprintf(command, sizeof command, "redis-cli -u '%s' DEL '%s' >/dev/null",
           testing_env("REDMUTEX_TEST_URL"), name);
  CHECK(system(command) == 0);
  CHECK_RESULT(redmutex_unlock(guard), REDMUTEX_RESULT_LOST);
  CHECK(last_error_contains("not there"));
  redmutex_client_free(client);
}

int main(void) {
  RUN(test_lost_lock_is_reported_by_callback_and_is_held);
  RUN(test_callback_registered_after_the_loss_runs_at_once);
  RUN(test_no_callback_after_unlock);
  RUN(test_no_callback_after_guard_free);
  RUN(test_wait_lost_times_out_while_held);
  RUN(test_unlock_of_a_key_that_vanished_is_lost);
  return TESTING_SUMMARY();
}
