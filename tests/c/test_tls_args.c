/* TLS settings: redmutex_client_options_set_tls_ca_cert's argument handling. Each bad argument
 * is answered with an error code and a message, never a crash, and no client is made.
 * (Locking over TLS itself is tested against a TLS-only redis-server in test_tls.c,
 * tests/tests/tls.rs and py/tests/test_tls.py.) */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "redmutex.h"
#include "support.h"
#include "testing.h"

#define CLIENT_SENTINEL ((redmutex_client *)(uintptr_t)0x5a5a5a5a)

/* A throwaway self-signed CA certificate (its key was never kept). */
static const char CA_PEM[] =
    "-----BEGIN CERTIFICATE-----\n"
    "MIIBkTCCATegAwIBAgIUWndnjHFBRG71Ggp9K42Zl66gu7cwCgYIKoZIzj0EAwIw\n"
    "HTEbMBkGA1UEAwwScmVkbXV0ZXggQyB0ZXN0IENBMCAXDTI2MTEyOTIxNTcxNloY\n"
    "DzIxMjYxMTA1MjE1NzE2WjAdMRswGQYDVQQDDBJyZWRtdXRleCBDIHRlc3QgQ0Ew\n"
    "WTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAASkCucNj7O78gsoRaGUT1GnG8vGci8N\n"
    "PgGsesBzqSJ93q8JPo5WbiRaYrvh8SStQujV0JzJi/r9XvoW1trGFMGmo1MwUTAd\n"
    "BgNVHQ4EFgQUNFLfu5CFe/iOGD+g8uScpDxrqDMwHwYDVR0jBBgwFoAUNFLfu5CF\n"
    "e/iOGD+g8uScpDxrqDMwDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNIADBF\n"
    "AiA4yo1qAusO8DdGY7tuik/h6N7zCiF31TJOhTqAHR6wMAIhAO9E18Df9L9pYlmq\n"
    "cee3XiqlCf7xKZpnZp4wcM3tZ6Fv\n"
    "-----END CERTIFICATE-----\n";

static const uint8_t *pem(const char *s) { return (const uint8_t *)s; }

static void test_null_and_empty_arguments(void) {
  redmutex_client_options *options = NULL;
  CHECK_RESULT(redmutex_client_options_set_tls_ca_cert(NULL, pem(CA_PEM), strlen(CA_PEM)),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK(last_error_contains("`options`"));
  CHECK_OK(redmutex_client_options_new(&options));
  CHECK_RESULT(redmutex_client_options_set_tls_ca_cert(options, NULL, 10),
               REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK(last_error_contains("`pem`"));
  CHECK_RESULT(redmutex_client_options_set_tls_ca_cert(options, pem(CA_PEM), 0),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(redmutex_client_options_set_tls_ca_cert(options, pem(CA_PEM), SIZE_MAX),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  redmutex_client_options_free(options);
}

/* Makes a client for `url` with `ca` as the TLS CA; returns its result (frees the client). */
static redmutex_result client_with_ca(const char *url, const uint8_t *ca, size_t ca_len) {
  redmutex_client_options *options = NULL;
  redmutex_client *client = CLIENT_SENTINEL;
  const char *urls[1] = {url};
  redmutex_result set;
  if (redmutex_client_options_new(&options) != REDMUTEX_RESULT_OK) return REDMUTEX_RESULT_OTHER;
  set = redmutex_client_options_set_tls_ca_cert(options, ca, ca_len);
  if (set != REDMUTEX_RESULT_OK) {
    redmutex_client_options_free(options);
    return set;
  }
  redmutex_result made = redmutex_client_new_with_options(urls, 1, options, &client);
  redmutex_client_options_free(options);
  if (made == REDMUTEX_RESULT_OK) {
    redmutex_client_free(client);
  } else if (client != CLIENT_SENTINEL) {
    return REDMUTEX_RESULT_OTHER; /* a failure must not write the out-pointer */
  }
  return made;
}

static void test_bad_pem_is_an_invalid_argument(void) {
  static const char garbage[] = "not a certificate";
  static const char broken[] = "-----BEGIN CERTIFICATE-----\n%%%%\n-----END CERTIFICATE-----\n";
  static const uint8_t binary[] = {0x30, 0x82, 0x00, 0xff, 0x00};
  CHECK_RESULT(client_with_ca("rediss://127.0.0.1:1", pem(garbage), strlen(garbage)),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK(last_error_contains("PEM"));
  CHECK_RESULT(client_with_ca("rediss://127.0.0.1:1", pem(broken), strlen(broken)),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(client_with_ca("rediss://127.0.0.1:1", binary, sizeof binary),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  /* A PEM cut short. */
  CHECK_RESULT(client_with_ca("rediss://127.0.0.1:1", pem(CA_PEM), strlen(CA_PEM) / 2),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
}

static void test_a_ca_needs_rediss_urls(void) {
  CHECK_OK(client_with_ca("rediss://127.0.0.1:1", pem(CA_PEM), strlen(CA_PEM)));
  CHECK_OK(client_with_ca("rediss://127.0.0.1:1/#insecure", pem(CA_PEM), strlen(CA_PEM)));
  CHECK_RESULT(client_with_ca(testing_env("REDMUTEX_TEST_URL"), pem(CA_PEM), strlen(CA_PEM)),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK(last_error_contains("rediss://"));
}

int main(void) {
  RUN(test_null_and_empty_arguments);
  RUN(test_bad_pem_is_an_invalid_argument);
  RUN(test_a_ca_needs_rediss_urls);
  return TESTING_SUMMARY();
}
