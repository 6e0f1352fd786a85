/* Locking over a real TLS handshake: a TLS-only redis-server whose certificate the given CA
 * signed (scripts/test-c.sh makes the PKI with openssl). The right CA locks; a CA that signed
 * nothing fails at once with a connection error that says the certificate did not verify.
 * Skipped, with a note, when test-c.sh could not start a TLS server (no openssl, or a
 * redis-server built without TLS). */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redmutex.h"
#include "support.h"
#include "testing.h"

/* The whole file at `path`, NUL-terminated; *len is its size. Aborts the test on failure. */
static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  char *buf = malloc(1 << 16);
  if (f == NULL || buf == NULL) {
    fprintf(stderr, "cannot read %s\n", path);
    exit(EXIT_FAILURE);
  }
  *len = fread(buf, 1, (1 << 16) - 1, f);
  buf[*len] = '\0';
  fclose(f);
  return buf;
}

/* Sets *out to a client of the TLS server that trusts the CA in the file named by the
 * variable `ca_env`; leaves it NULL (after a failed check) if it cannot be made. Handshakes
 * are slow under valgrind: a connection the per-node timeout cuts short is finished in the
 * background within `connect_timeout_ms`. */
static void tls_client(const char *ca_env, uint64_t connect_timeout_ms, redmutex_client **out) {
  size_t len = 0;
  char *pem = read_file(testing_env(ca_env), &len);
  redmutex_client_options *options = NULL;
  const char *urls[1] = {testing_env("REDMUTEX_TEST_TLS_URL")};
  *out = NULL;
  CHECK_OK(redmutex_client_options_new(&options));
  CHECK_OK(redmutex_client_options_set_connect_timeout(options, connect_timeout_ms));
  CHECK_OK(redmutex_client_options_set_tls_ca_cert(options, (const uint8_t *)pem, len));
  CHECK_OK(redmutex_client_new_with_options(urls, 1, options, out));
  redmutex_client_options_free(options);
  free(pem);
}

static void test_the_right_ca_locks(void) {
  char name[64];
  redmutex_guard *guard = NULL;
  redmutex_guard *other = NULL;
  redmutex_client *client = NULL;
  tls_client("REDMUTEX_TEST_TLS_CA", 20000, &client);
  if (client == NULL) return;
  unique_name(name, sizeof name, "tls");
  CHECK_OK(redmutex_lock(client, name, 5000, 20000, &guard));
  CHECK(redmutex_guard_fence(guard) >= 1);
  CHECK_RESULT(redmutex_lock(client, name, 5000, 0, &other), REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK_OK(redmutex_unlock(guard));
  redmutex_client_free(client);
}

static void test_a_ca_that_signed_nothing_is_a_certificate_error(void) {
  char name[64];
  redmutex_guard *guard = NULL;
  redmutex_client *client = NULL;
  double started;
  tls_client("REDMUTEX_TEST_TLS_OTHER_CA", 20000, &client);
  if (client == NULL) return;
  unique_name(name, sizeof name, "tls-wrong-ca");
  /* Waiting cannot fix a certificate: the first failed handshake is reported at once, long
   * before the 20 s wait or the 20 s connect timeout. */
  started = now_ms();
  CHECK_RESULT(redmutex_lock(client, name, 5000, 20000, &guard), REDMUTEX_RESULT_CONNECTION);
  CHECK(guard == NULL);
  CHECK(last_error_contains("certificate"));
  CHECK(now_ms() - started < 15000);
  redmutex_client_free(client);
}

int main(void) {
  const char *url = getenv("REDMUTEX_TEST_TLS_URL");
  if (url == NULL || url[0] == '\0') {
    printf("SKIPPED: no TLS redis-server (see test-c.sh's output)\n");
    return 0;
  }
  RUN(test_the_right_ca_locks);
  RUN(test_a_ca_that_signed_nothing_is_a_certificate_error);
  return TESTING_SUMMARY();
}
