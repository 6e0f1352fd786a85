/* Locking over a real TLS handshake: a TLS-only redis-server whose certificate the given CA
 * signed (scripts/test-c.sh makes the PKI with openssl), and the same over TLS to a Redis
 * Cluster (rediss+cluster://) and a Sentinel group (rediss+sentinel://). The right CA locks; a
 * CA that signed nothing fails at once with a connection error that says the certificate did
 * not verify. Skipped, with a note, when test-c.sh could not start the TLS servers (no
 * openssl, or a redis-server built without TLS). */
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

/* Sets *out to a client of the TLS server (or cluster, or Sentinel group) whose URL is in the
 * variable `url_env`, trusting the CA in the file named by the variable `ca_env`; leaves it
 * NULL (after a failed check) if it cannot be made. Handshakes are slow under valgrind: a
 * connection the per-node timeout cuts short is finished in the background within
 * `connect_timeout_ms`. */
static void tls_client(const char *url_env, const char *ca_env, uint64_t connect_timeout_ms,
                       redmutex_client **out) {
  size_t len = 0;
  char *pem = read_file(testing_env(ca_env), &len);
  redmutex_client_options *options = NULL;
  const char *urls[1] = {testing_env(url_env)};
  *out = NULL;
  CHECK_OK(redmutex_client_options_new(&options));
  CHECK_OK(redmutex_client_options_set_connect_timeout(options, connect_timeout_ms));
  CHECK_OK(redmutex_client_options_set_node_timeout(options, TEST_NODE_TIMEOUT_MS));
  CHECK_OK(redmutex_client_options_set_tls_ca_cert(options, (const uint8_t *)pem, len));
  CHECK_OK(redmutex_client_new_with_options(urls, 1, options, out));
  redmutex_client_options_free(options);
  free(pem);
}

/* The right CA locks on the server (or cluster, or group) whose URL is in `url_env`. */
static void right_ca_locks(const char *url_env, const char *ca_env) {
  char name[64];
  redmutex_guard *guard = NULL;
  redmutex_guard *other = NULL;
  redmutex_client *client = NULL;
  tls_client(url_env, ca_env, 20000, &client);
  if (client == NULL) return;
  unique_name(name, sizeof name, "tls");
  CHECK_OK(redmutex_lock(client, name, 5000, 20000, &guard));
  CHECK(redmutex_guard_fence(guard) >= 1);
  CHECK_RESULT(redmutex_lock(client, name, 5000, 0, &other), REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK_OK(redmutex_unlock(guard));
  redmutex_client_free(client);
}

/* A CA that signed nothing is a certificate error on the server whose URL is in `url_env`. */
static void wrong_ca_fails_at_once(const char *url_env, const char *ca_env) {
  char name[64];
  redmutex_guard *guard = NULL;
  redmutex_client *client = NULL;
  double started;
  tls_client(url_env, ca_env, 60000, &client);
  if (client == NULL) return;
  unique_name(name, sizeof name, "tls-wrong-ca");
  /* Waiting cannot fix a certificate: the first failed handshake is reported at once, long
   * before the 60 s wait or the 60 s connect timeout (natively in well under a second; under
   * valgrind, whose handshakes are some 70 times slower, in about 10 s). */
  started = now_ms();
  CHECK_RESULT(redmutex_lock(client, name, 5000, 60000, &guard), REDMUTEX_RESULT_CONNECTION);
  CHECK(guard == NULL);
  CHECK(last_error_contains("certificate"));
  fprintf(stderr, "  a wrong CA on %s was reported in %.0f ms\n", url_env, now_ms() - started);
  CHECK(now_ms() - started < 30000);
  redmutex_client_free(client);
}

static void test_the_right_ca_locks(void) {
  right_ca_locks("REDMUTEX_TEST_TLS_URL", "REDMUTEX_TEST_TLS_CA");
}

static void test_a_ca_that_signed_nothing_is_a_certificate_error(void) {
  wrong_ca_fails_at_once("REDMUTEX_TEST_TLS_URL", "REDMUTEX_TEST_TLS_OTHER_CA");
}

static void test_a_tls_cluster_locks_and_refuses_a_wrong_ca(void) {
  right_ca_locks("REDMUTEX_TEST_TLS_CLUSTER_URL", "REDMUTEX_TEST_TLS_TOPOLOGY_CA");
  wrong_ca_fails_at_once("REDMUTEX_TEST_TLS_CLUSTER_URL", "REDMUTEX_TEST_TLS_TOPOLOGY_OTHER_CA");
}

static void test_a_tls_sentinel_group_locks_and_refuses_a_wrong_ca(void) {
  right_ca_locks("REDMUTEX_TEST_TLS_SENTINEL_URL", "REDMUTEX_TEST_TLS_TOPOLOGY_CA");
  wrong_ca_fails_at_once("REDMUTEX_TEST_TLS_SENTINEL_URL", "REDMUTEX_TEST_TLS_TOPOLOGY_OTHER_CA");
}

static bool have(const char *env) {
  const char *value = getenv(env);
  return value != NULL && value[0] != '\0';
}

int main(void) {
  if (!have("REDMUTEX_TEST_TLS_URL")) {
    printf("SKIPPED: no TLS redis-server (see test-c.sh's output)\n");
    return 0;
  }
  RUN(test_the_right_ca_locks);
  RUN(test_a_ca_that_signed_nothing_is_a_certificate_error);
  if (have("REDMUTEX_TEST_TLS_CLUSTER_URL")) {
    RUN(test_a_tls_cluster_locks_and_refuses_a_wrong_ca);
    RUN(test_a_tls_sentinel_group_locks_and_refuses_a_wrong_ca);
  } else {
    printf("SKIPPED: no TLS cluster or Sentinel group (see test-c.sh's output)\n");
  }
  return TESTING_SUMMARY();
}
