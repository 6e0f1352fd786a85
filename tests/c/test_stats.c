/* redmutex_client_stats: each figure moves when the thing it counts happens through the C API
 * (a grant, a refusal, a wait that runs out, a release, a loss), and the struct is versioned
 * by its size: an older, shorter struct is filled only as far as it goes. */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redmutex.h"
#include "support.h"
#include "testing.h"

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
  redmutex_client_free(client);
}

int main(void) {
  RUN(test_grants_refusals_timeouts_and_releases_are_counted);
  RUN(test_a_loss_is_counted_with_its_reason);
  RUN(test_the_struct_is_versioned_by_its_size);
  return TESTING_SUMMARY();
}
