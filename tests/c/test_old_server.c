/* A server older than Redis 6.2 (scripts/test-c.sh starts Redis 6.0.9 as
 * REDMUTEX_TEST_OLD_URL) is refused at first use with a server error naming the node, its
 * version and the one needed; nothing is held. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>

#include "redmutex.h"
#include "support.h"
#include "testing.h"

static void test_a_server_older_than_6_2_is_refused_naming_its_version(void) {
  char name[64];
  char said[256];
  redmutex_guard *guard = NULL;
  redmutex_client *client = NULL;
  const char *url = testing_env("REDMUTEX_TEST_OLD_URL");
  const char *urls[1] = {url};
  CHECK_OK(redmutex_client_new(urls, 1, &client));
  unique_name(name, sizeof name, "old-server");
  CHECK_RESULT(redmutex_lock(client, name, 5000, 5000, &guard), REDMUTEX_RESULT_SERVER);
  CHECK(guard == NULL);
  snprintf(said, sizeof said, "%s runs Redis 6.0.9; redmutex needs Redis 6.2 or later", url);
  CHECK(last_error_contains(said));
  redmutex_client_free(client);
}

int main(void) {
  RUN(test_a_server_older_than_6_2_is_refused_naming_its_version);
  return TESTING_SUMMARY();
}
