/* Bad arguments: every NULL argument of every function, strings that are not UTF-8, and
 * values out of range. Each is answered with an error code (and a message), never a crash,
 * and no out-pointer is written on failure. */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "redmutex.h"
#include "support.h"
#include "testing.h"

/* Values that a failing call must leave alone. */
#define GUARD_SENTINEL ((redmutex_guard *)(uintptr_t)0x5a5a5a5a)
#define CLIENT_SENTINEL ((redmutex_client *)(uintptr_t)0x5a5a5a5a)

static const char NOT_UTF8[] = {'l', 'o', 'c', 'k', (char)0xff, (char)0xfe, '\0'};
static const char TRUNCATED_UTF8[] = {'n', 'a', 'm', 'e', (char)0xc3, '\0'};

static void noop_lost(void *user_data) { (void)user_data; }
static bool never_interrupt(void *user_data) {
  (void)user_data;
  return false;
}

static void test_result_names_are_stable(void) {
  CHECK(REDMUTEX_RESULT_OK == 0);
  CHECK(REDMUTEX_RESULT_WOULD_BLOCK == 1);
  CHECK(REDMUTEX_RESULT_NO_QUORUM == 2);
  CHECK(REDMUTEX_RESULT_LOST == 3);
  CHECK(REDMUTEX_RESULT_NOT_HELD == 4);
  CHECK(REDMUTEX_RESULT_CONNECTION == 5);
  CHECK(REDMUTEX_RESULT_AUTH == 6);
  CHECK(REDMUTEX_RESULT_SERVER == 7);
  CHECK(REDMUTEX_RESULT_INVALID_ARGUMENT == 8);
  CHECK(REDMUTEX_RESULT_INTERRUPTED == 9);
  CHECK(REDMUTEX_RESULT_NULL_PARAMETER == 100);
  CHECK(REDMUTEX_RESULT_INVALID_UTF8 == 101);
  CHECK(REDMUTEX_RESULT_PANIC == 102);
  CHECK(REDMUTEX_RESULT_OTHER == 103);
  CHECK(strcmp(redmutex_result_name(REDMUTEX_RESULT_OK), "REDMUTEX_RESULT_OK") == 0);
  CHECK(strcmp(redmutex_result_name(REDMUTEX_RESULT_NO_QUORUM), "REDMUTEX_RESULT_NO_QUORUM") == 0);
  CHECK(strcmp(redmutex_result_name(REDMUTEX_RESULT_INVALID_UTF8),
               "REDMUTEX_RESULT_INVALID_UTF8") == 0);
  /* Values from a newer library, or garbage, are named safely. */
  CHECK(strcmp(redmutex_result_name(10), "REDMUTEX_RESULT_UNKNOWN") == 0);
  CHECK(strcmp(redmutex_result_name(UINT32_MAX), "REDMUTEX_RESULT_UNKNOWN") == 0);
}

static void test_last_error_message_is_cut_like_snprintf(void) {
  char buf[16];
  size_t n = 0, full = 0;
  redmutex_client *client = CLIENT_SENTINEL;
  CHECK_RESULT(redmutex_client_new(NULL, 1, &client), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_OK(redmutex_last_error_message(NULL, 0, &full));
  CHECK(full == strlen("null parameter: `urls` is NULL"));
  CHECK_OK(redmutex_last_error_message(buf, sizeof buf, &n));
  CHECK(n == full);
  CHECK(strlen(buf) == sizeof buf - 1);
  CHECK(strncmp(buf, "null parameter:", 15) == 0);
  CHECK(strcmp(last_error(), "null parameter: `urls` is NULL") == 0);
  /* Bad arguments to the message function itself leave the message alone. */
  CHECK_RESULT(redmutex_last_error_message(buf, sizeof buf, NULL), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_last_error_message(NULL, 4, &n), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK(strcmp(last_error(), "null parameter: `urls` is NULL") == 0);
  /* A success leaves the last failure's message in place. */
  CHECK(strcmp(redmutex_version(), EXPECTED_VERSION) == 0);
  CHECK(last_error_contains("`urls`"));
}

static void test_free_null_is_a_no_op(void) {
  redmutex_client_free(NULL);
  redmutex_client_options_free(NULL);
  redmutex_lock_options_free(NULL);
  redmutex_guard_free(NULL);
}

static void test_null_arguments_of_client_functions(void) {
  const char *urls[1];
  const char *with_null[2];
  redmutex_client *client = CLIENT_SENTINEL;
  redmutex_client_options *options = NULL;
  urls[0] = testing_env("REDMUTEX_TEST_URL");
  with_null[0] = urls[0];
  with_null[1] = NULL;
  CHECK_OK(redmutex_client_options_new(&options));

  CHECK_RESULT(redmutex_client_new(NULL, 1, &client), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_client_new(urls, 1, NULL), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK(last_error_contains("`out_client`"));
  CHECK_RESULT(redmutex_client_new(with_null, 2, &client), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK(last_error_contains("`urls[1]`"));
  CHECK_RESULT(redmutex_client_new_with_options(NULL, 1, options, &client),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_client_new_with_options(urls, 1, NULL, &client),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK(last_error_contains("`options`"));
  CHECK_RESULT(redmutex_client_new_with_options(urls, 1, options, NULL),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_client_new_with_options(with_null, 2, options, &client),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK(client == CLIENT_SENTINEL);

  CHECK_RESULT(redmutex_client_options_new(NULL), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_client_options_set_connect_timeout(NULL, 100),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_client_options_set_node_timeout(NULL, 100),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_client_options_set_owner(NULL, "me"), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_client_options_set_owner(options, NULL), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK(last_error_contains("`owner`"));
  redmutex_client_options_free(options);
}

static void test_null_arguments_of_lock_functions(void) {
  const uint8_t bytes[] = {'x'};
  redmutex_client *client = test_client();
  redmutex_guard *guard = GUARD_SENTINEL;
  redmutex_lock_options *options = NULL;
  bool locked = true;
  CHECK(client != NULL);
  CHECK_OK(redmutex_lock_options_new(&options));

  CHECK_RESULT(redmutex_lock(NULL, "n", 1000, 0, &guard), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK(last_error_contains("`client`"));
  CHECK_RESULT(redmutex_lock(client, NULL, 1000, 0, &guard), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK(last_error_contains("`name`"));
  CHECK_RESULT(redmutex_lock(client, "n", 1000, 0, NULL), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK(last_error_contains("`out_guard`"));

  CHECK_RESULT(redmutex_lock_bytes(NULL, bytes, 1, 1000, 0, &guard),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_lock_bytes(client, NULL, 1, 1000, 0, &guard),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_lock_bytes(client, bytes, 1, 1000, 0, NULL),
               REDMUTEX_RESULT_NULL_PARAMETER);

  CHECK_RESULT(redmutex_lock_with_options(NULL, bytes, 1, options, 0, &guard),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_lock_with_options(client, NULL, 1, options, 0, &guard),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_lock_with_options(client, bytes, 1, NULL, 0, &guard),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_lock_with_options(client, bytes, 1, options, 0, NULL),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK(guard == GUARD_SENTINEL);

  CHECK_RESULT(redmutex_is_locked(NULL, "n", &locked), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_is_locked(client, NULL, &locked), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_is_locked(client, "n", NULL), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_is_locked_bytes(NULL, bytes, 1, &locked), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_is_locked_bytes(client, NULL, 1, &locked), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_is_locked_bytes(client, bytes, 1, NULL), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK(locked);

  {
    char holder[8] = "x";
    size_t n = 7;
    int64_t ttl = 7;
    uint64_t fence = 7;
    CHECK_RESULT(redmutex_status(NULL, "n", holder, sizeof holder, &n, &ttl, &fence),
                 REDMUTEX_RESULT_NULL_PARAMETER);
    CHECK_RESULT(redmutex_status(client, NULL, holder, sizeof holder, &n, &ttl, &fence),
                 REDMUTEX_RESULT_NULL_PARAMETER);
    CHECK_RESULT(redmutex_status(client, "n", NULL, sizeof holder, &n, &ttl, &fence),
                 REDMUTEX_RESULT_NULL_PARAMETER);
    CHECK(last_error_contains("holder_buf"));
    CHECK_RESULT(redmutex_status(client, "n", holder, sizeof holder, NULL, &ttl, &fence),
                 REDMUTEX_RESULT_NULL_PARAMETER);
    CHECK_RESULT(redmutex_status(client, "n", holder, sizeof holder, &n, NULL, &fence),
                 REDMUTEX_RESULT_NULL_PARAMETER);
    CHECK_RESULT(redmutex_status(client, "n", holder, sizeof holder, &n, &ttl, NULL),
                 REDMUTEX_RESULT_NULL_PARAMETER);
    CHECK_RESULT(redmutex_status_bytes(client, NULL, 1, holder, sizeof holder, &n, &ttl, &fence),
                 REDMUTEX_RESULT_NULL_PARAMETER);
    CHECK_RESULT(redmutex_status_bytes(NULL, bytes, 1, holder, sizeof holder, &n, &ttl, &fence),
                 REDMUTEX_RESULT_NULL_PARAMETER);
    /* Nothing was written by the failed calls. */
    CHECK(holder[0] == 'x' && n == 7 && ttl == 7 && fence == 7);
  }

  redmutex_lock_options_free(options);
  redmutex_client_free(client);
}

static void test_null_arguments_of_lock_options_functions(void) {
  redmutex_lock_options *options = NULL;
  CHECK_OK(redmutex_lock_options_new(&options));
  CHECK_RESULT(redmutex_lock_options_new(NULL), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_lock_options_set_ttl(NULL, 1000), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_lock_options_set_auto_renew(NULL, false), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_lock_options_set_max_hold(NULL, 1000), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_lock_options_set_fencing(NULL, false), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_lock_options_set_node_timeout(NULL, 100), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_lock_options_set_retry_delay(NULL, 10), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_lock_options_set_wait_cap(NULL, 10), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_lock_options_set_handoff_window(NULL, 10), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_lock_options_set_min_replicas(NULL, 1, 100),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_lock_options_set_interrupt(NULL, never_interrupt, NULL),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_lock_options_set_interrupt(options, NULL, NULL),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK(last_error_contains("`callback`"));
  /* user_data may be NULL. */
  CHECK_OK(redmutex_lock_options_set_interrupt(options, never_interrupt, NULL));
  redmutex_lock_options_free(options);
}

static void test_null_arguments_of_guard_functions(void) {
  char name[128];
  char buf[64];
  size_t n = 99;
  bool lost = true;
  redmutex_client *client = test_client();
  redmutex_guard *guard = NULL;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "null-guard");

  /* Functions without a result answer a NULL guard with false / 0. */
  CHECK(redmutex_guard_fence(NULL) == 0);
  CHECK(!redmutex_guard_is_held(NULL));
  CHECK(redmutex_guard_valid_ms(NULL) == 0);
  CHECK(redmutex_guard_renewals(NULL) == 0);
  CHECK_RESULT(redmutex_guard_check(NULL), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_guard_extend(NULL, 1000), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_guard_on_lost(NULL, noop_lost, NULL), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_guard_wait_lost(NULL, 10, &lost), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_guard_token(NULL, buf, sizeof buf, &n), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_unlock(NULL), REDMUTEX_RESULT_NULL_PARAMETER);

  CHECK_OK(redmutex_lock(client, name, 30000, 0, &guard));
  CHECK_RESULT(redmutex_guard_on_lost(guard, NULL, NULL), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_guard_wait_lost(guard, 10, NULL), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_guard_token(guard, NULL, sizeof buf, &n), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_guard_token(guard, buf, sizeof buf, NULL), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK(lost);
  CHECK(n == 99);
  /* user_data may be NULL. */
  CHECK_OK(redmutex_guard_on_lost(guard, noop_lost, NULL));
  CHECK(redmutex_guard_is_held(guard));
  CHECK_OK(redmutex_unlock(guard));
  redmutex_client_free(client);
}

static void test_invalid_utf8_names(void) {
  redmutex_client *client = test_client();
  redmutex_guard *guard = GUARD_SENTINEL;
  bool locked = true;
  CHECK(client != NULL);
  CHECK_RESULT(redmutex_lock(client, NOT_UTF8, 1000, 0, &guard), REDMUTEX_RESULT_INVALID_UTF8);
  CHECK(last_error_contains("`name`"));
  CHECK_RESULT(redmutex_lock(client, TRUNCATED_UTF8, 1000, -1, &guard),
               REDMUTEX_RESULT_INVALID_UTF8);
  CHECK_RESULT(redmutex_is_locked(client, NOT_UTF8, &locked), REDMUTEX_RESULT_INVALID_UTF8);
  {
    size_t n = 7;
    int64_t ttl = 7;
    uint64_t fence = 7;
    CHECK_RESULT(redmutex_status(client, NOT_UTF8, NULL, 0, &n, &ttl, &fence),
                 REDMUTEX_RESULT_INVALID_UTF8);
    CHECK(n == 7 && ttl == 7 && fence == 7);
  }
  CHECK(guard == GUARD_SENTINEL);
  CHECK(locked);
  redmutex_client_free(client);
}

static void test_invalid_utf8_urls_and_owner(void) {
  const char *urls[2];
  redmutex_client *client = CLIENT_SENTINEL;
  redmutex_client_options *options = NULL;
  urls[0] = testing_env("REDMUTEX_TEST_URL");
  urls[1] = NOT_UTF8;
  CHECK_RESULT(redmutex_client_new(urls, 2, &client), REDMUTEX_RESULT_INVALID_UTF8);
  CHECK(last_error_contains("`urls[1]`"));
  CHECK_OK(redmutex_client_options_new(&options));
  CHECK_RESULT(redmutex_client_new_with_options(urls, 2, options, &client),
               REDMUTEX_RESULT_INVALID_UTF8);
  CHECK_RESULT(redmutex_client_options_set_owner(options, NOT_UTF8), REDMUTEX_RESULT_INVALID_UTF8);
  CHECK(client == CLIENT_SENTINEL);
  redmutex_client_options_free(options);
}

static void test_out_of_range_values(void) {
  char name[600];
  uint8_t long_name[600];
  const char *urls[64];
  const char *bad_url[] = {"http://127.0.0.1:6379"};
  redmutex_client *client = test_client();
  redmutex_client *other = CLIENT_SENTINEL;
  redmutex_guard *guard = GUARD_SENTINEL;
  redmutex_client_options *client_options = NULL;
  redmutex_lock_options *options = NULL;
  bool locked = true;
  int i;
  CHECK(client != NULL);
  for (i = 0; i < 64; i++) urls[i] = testing_env("REDMUTEX_TEST_URL");
  unique_name(name, sizeof name, "range");

  /* Clients: no URL, too many, a malformed one, timeouts and labels out of range. */
  CHECK_RESULT(redmutex_client_new(urls, 0, &other), REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(redmutex_client_new(urls, 64, &other), REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(redmutex_client_new(urls, SIZE_MAX, &other), REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(redmutex_client_new(bad_url, 1, &other), REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_OK(redmutex_client_options_new(&client_options));
  CHECK_OK(redmutex_client_options_set_connect_timeout(client_options, 0));
  CHECK_RESULT(redmutex_client_new_with_options(urls, 1, client_options, &other),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_OK(redmutex_client_options_set_connect_timeout(client_options, UINT64_MAX));
  CHECK_RESULT(redmutex_client_new_with_options(urls, 1, client_options, &other),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_OK(redmutex_client_options_set_connect_timeout(client_options, 1000));
  CHECK_OK(redmutex_client_options_set_owner(client_options, "has a space"));
  CHECK_RESULT(redmutex_client_new_with_options(urls, 1, client_options, &other),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK(other == CLIENT_SENTINEL);
  redmutex_client_options_free(client_options);

  /* Locks: TTL, wait, name length. Nothing is sent to Redis for any of them. */
  CHECK_RESULT(redmutex_lock(client, name, 0, 0, &guard), REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(redmutex_lock(client, name, 9, 0, &guard), REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(redmutex_lock(client, name, 24ull * 3600 * 1000 + 1, 0, &guard),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(redmutex_lock(client, name, UINT64_MAX, 0, &guard), REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(redmutex_lock(client, name, 1000, -2, &guard), REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK(last_error_contains("wait_ms"));
  CHECK_RESULT(redmutex_lock(client, name, 1000, INT64_MIN, &guard),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(redmutex_lock(client, "", 1000, 0, &guard), REDMUTEX_RESULT_INVALID_ARGUMENT);
  memset(name, 'n', 513);
  name[513] = '\0';
  CHECK_RESULT(redmutex_lock(client, name, 1000, 0, &guard), REDMUTEX_RESULT_INVALID_ARGUMENT);
  memset(long_name, 'n', sizeof long_name);
  CHECK_RESULT(redmutex_lock_bytes(client, long_name, 513, 1000, 0, &guard),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(redmutex_lock_bytes(client, long_name, SIZE_MAX, 1000, 0, &guard),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(redmutex_lock_bytes(client, long_name, 0, 1000, 0, &guard),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(redmutex_is_locked_bytes(client, long_name, SIZE_MAX, &locked),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  {
    size_t n = 0;
    int64_t ttl = 0;
    uint64_t fence = 0;
    CHECK_RESULT(redmutex_status_bytes(client, long_name, 513, NULL, 0, &n, &ttl, &fence),
                 REDMUTEX_RESULT_INVALID_ARGUMENT);
    CHECK_RESULT(redmutex_status_bytes(client, long_name, 0, NULL, 0, &n, &ttl, &fence),
                 REDMUTEX_RESULT_INVALID_ARGUMENT);
  }

  /* Lock options are checked by the lock call. */
  CHECK_OK(redmutex_lock_options_new(&options));
  CHECK_OK(redmutex_lock_options_set_ttl(options, 1000));
  CHECK_OK(redmutex_lock_options_set_node_timeout(options, 2000)); /* more than the TTL */
  CHECK_RESULT(redmutex_lock_with_options(client, long_name, 10, options, 0, &guard),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_OK(redmutex_lock_options_set_node_timeout(options, 0));
  CHECK_OK(redmutex_lock_options_set_max_hold(options, 1));
  CHECK_RESULT(redmutex_lock_with_options(client, long_name, 10, options, 0, &guard),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_OK(redmutex_lock_options_set_max_hold(options, 0));
  CHECK_OK(redmutex_lock_options_set_wait_cap(options, 0));
  CHECK_RESULT(redmutex_lock_with_options(client, long_name, 10, options, 0, &guard),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_OK(redmutex_lock_options_set_wait_cap(options, 250));
  CHECK_OK(redmutex_lock_options_set_retry_delay(options, UINT64_MAX));
  CHECK_RESULT(redmutex_lock_with_options(client, long_name, 10, options, 0, &guard),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_OK(redmutex_lock_options_set_retry_delay(options, 50));
  CHECK_OK(redmutex_lock_options_set_handoff_window(options, 61000)); /* more than 60 s */
  CHECK_RESULT(redmutex_lock_with_options(client, long_name, 10, options, 0, &guard),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_OK(redmutex_lock_options_set_handoff_window(options, 20));
  CHECK_OK(redmutex_lock_options_set_min_replicas(options, 1, 600)); /* more than TTL/2 */
  CHECK_RESULT(redmutex_lock_with_options(client, long_name, 10, options, 0, &guard),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK(last_error_contains("min_replicas"));
  CHECK_OK(redmutex_lock_options_set_min_replicas(options, 1, 0)); /* timeout below 1 ms */
  CHECK_RESULT(redmutex_lock_with_options(client, long_name, 10, options, 0, &guard),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_OK(redmutex_lock_options_set_min_replicas(options, 0, 0)); /* off again */
  CHECK(guard == GUARD_SENTINEL);
  CHECK(locked);
  redmutex_lock_options_free(options);
  redmutex_client_free(client);
}

static void test_out_of_range_guard_values(void) {
  char name[128];
  redmutex_client *client = test_client();
  redmutex_guard *guard = NULL;
  bool lost = true;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "guard-range");
  CHECK_OK(redmutex_lock(client, name, 30000, 0, &guard));
  CHECK_RESULT(redmutex_guard_extend(guard, 0), REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(redmutex_guard_extend(guard, UINT64_MAX), REDMUTEX_RESULT_INVALID_ARGUMENT);
  /* A zero timeout answers at once. */
  CHECK_OK(redmutex_guard_wait_lost(guard, 0, &lost));
  CHECK(!lost);
  CHECK(redmutex_guard_is_held(guard));
  CHECK_OK(redmutex_unlock(guard));
  redmutex_client_free(client);
}

int main(void) {
  RUN(test_result_names_are_stable);
  RUN(test_last_error_message_is_cut_like_snprintf);
  RUN(test_free_null_is_a_no_op);
  RUN(test_null_arguments_of_client_functions);
  RUN(test_null_arguments_of_lock_functions);
  RUN(test_null_arguments_of_lock_options_functions);
  RUN(test_null_arguments_of_guard_functions);
  RUN(test_invalid_utf8_names);
  RUN(test_invalid_utf8_urls_and_owner);
  RUN(test_out_of_range_values);
  RUN(test_out_of_range_guard_values);
  return TESTING_SUMMARY();
}
