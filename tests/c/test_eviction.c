/* A Redis whose maxmemory-policy may evict locks (scripts/test-c.sh starts one with
 * allkeys-lru as REDMUTEX_TEST_EVICTING_URL): by default it works (the library logs a
 * warning once); with redmutex_client_options_set_require_noeviction it is refused at once
 * with a server error naming its policy, and nothing is held. */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "redmutex.h"
#include "support.h"
#include "testing.h"

/* Sets *out to a client of the evicting server, refusing it when `require`. */
static void evicting_client(bool require, redmutex_client **out) {
  redmutex_client_options *options = NULL;
  const char *urls[1] = {testing_env("REDMUTEX_TEST_EVICTING_URL")};
  *out = NULL;
  CHECK_OK(redmutex_client_options_new(&options));
  CHECK_OK(redmutex_client_options_set_require_noeviction(options, require));
  CHECK_OK(redmutex_client_options_set_node_timeout(options, TEST_NODE_TIMEOUT_MS));
  CHECK_OK(redmutex_client_new_with_options(urls, 1, options, out));
  redmutex_client_options_free(options);
}

static void test_an_evicting_server_is_used_by_default(void) {
  char name[64];
  redmutex_guard *guard = NULL;
  redmutex_client *client = NULL;
  evicting_client(false, &client);
  if (client == NULL) return;
  unique_name(name, sizeof name, "evict-default");
  CHECK_OK(redmutex_lock(client, name, 5000, 0, &guard));
  CHECK_OK(redmutex_unlock(guard));
  redmutex_client_free(client);
}

static void test_an_evicting_server_is_refused_when_required(void) {
  char name[64];
  redmutex_guard *guard = NULL;
  redmutex_client *client = NULL;
  evicting_client(true, &client);
  if (client == NULL) return;
  unique_name(name, sizeof name, "evict-strict");
  CHECK_RESULT(redmutex_lock(client, name, 5000, 5000, &guard), REDMUTEX_RESULT_SERVER);
  CHECK(guard == NULL);
  CHECK(last_error_contains("maxmemory-policy allkeys-lru"));
  redmutex_client_free(client);
}

static void test_a_null_options_handle_is_refused(void) {
  CHECK_RESULT(redmutex_client_options_set_require_noeviction(NULL, true),
               REDMUTEX_RESULT_NULL_PARAMETER);
}

int main(void) {
  RUN(test_an_evicting_server_is_used_by_default);
  RUN(test_an_evicting_server_is_refused_when_required);
  RUN(test_a_null_options_handle_is_refused);
  return TESTING_SUMMARY();
}
