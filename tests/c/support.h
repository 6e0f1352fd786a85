/*
 * Helpers shared by the C tests of the redmutex C API: result checks that print the
 * library's own message, unique lock names, clients for the test servers, and time.
 *
 * Include after testing.h and redmutex.h; the test file defines _GNU_SOURCE (for fork,
 * mmap, nanosleep, ...) before its first #include.
 */
#ifndef REDMUTEX_TESTS_SUPPORT_H
#define REDMUTEX_TESTS_SUPPORT_H

#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "redmutex.h"
#include "testing.h"

/* The calling thread's last failure message (a per-thread buffer, valid until the next call). */
static inline const char *last_error(void) {
  static _Thread_local char buf[8192];
  size_t n = 0;
  if (redmutex_last_error_message(buf, sizeof buf, &n) != REDMUTEX_RESULT_OK) return "?";
  return buf;
}

/* Checks that `expr` returns `want`; on a mismatch prints both names and the message. */
#define CHECK_RESULT(expr, want)                                                        \
  do {                                                                                  \
    redmutex_result check_got_ = (expr);                                                \
    if (check_got_ != (redmutex_result)(want)) {                                        \
      fprintf(stderr, "%s:%d: %s returned %s, expected %s (%s)\n", __FILE__, __LINE__, \
              #expr, redmutex_result_name(check_got_), redmutex_result_name(want),      \
              last_error());                                                            \
      testing_current_failed = 1;                                                       \
      return;                                                                           \
    }                                                                                   \
  } while (0)

#define CHECK_OK(expr) CHECK_RESULT(expr, REDMUTEX_RESULT_OK)

/* Whether the calling thread's last failure message contains `needle`. */
static inline int last_error_contains(const char *needle) {
  return strstr(last_error(), needle) != NULL;
}

/* A lock name no other test, run or process uses: the servers outlive one test program. */
static inline void unique_name(char *buf, size_t len, const char *what) {
  static atomic_uint counter;
  snprintf(buf, len, "redmutex-c-test:%ld:%u:%s", (long)getpid(),
           atomic_fetch_add(&counter, 1), what);
}

static inline double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static inline void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* A lock with a `ttl_ms` lease that nothing renews. */
static inline redmutex_result lock_unrenewed(redmutex_client *client, const char *name,
                                             uint64_t ttl_ms, redmutex_guard **out) {
  redmutex_lock_options *options = NULL;
  redmutex_result r;
  bool locked;
  /* Short leases have short node timeouts: open the connection first. */
  if ((r = redmutex_is_locked(client, name, &locked)) != REDMUTEX_RESULT_OK) return r;
  if ((r = redmutex_lock_options_new(&options)) != REDMUTEX_RESULT_OK) return r;
  redmutex_lock_options_set_ttl(options, ttl_ms);
  redmutex_lock_options_set_auto_renew(options, false);
  r = redmutex_lock_with_options(client, (const uint8_t *)name, strlen(name), options, 5000, out);
  redmutex_lock_options_free(options);
  return r;
}

/* A client for `n` URLs (several: Redlock), with the tests' node timeout, or NULL (with the
 * reason on stderr). */
static inline redmutex_client *client_of(const char *const *urls, size_t n) {
  redmutex_client *client = NULL;
  redmutex_client_options *options = NULL;
  redmutex_result r;
  if (redmutex_client_options_new(&options) != REDMUTEX_RESULT_OK) return NULL;
  redmutex_client_options_set_node_timeout(options, TEST_NODE_TIMEOUT_MS);
  r = redmutex_client_new_with_options(urls, n, options, &client);
  redmutex_client_options_free(options);
  if (r != REDMUTEX_RESULT_OK) {
    fprintf(stderr, "redmutex_client_new(%s, ...): %s\n", n ? urls[0] : "", last_error());
    return NULL;
  }
  return client;
}

/* A client for one URL (see client_of). */
static inline redmutex_client *client_for(const char *url) { return client_of(&url, 1); }

/* A client for the one-server test Redis. */
static inline redmutex_client *test_client(void) {
  return client_for(testing_env("REDMUTEX_TEST_URL"));
}

/* The five test servers: fills urls[0..4] with pointers into `storage`; returns the count. */
static inline size_t test_urls5(char *storage, size_t storage_len, const char *urls[5]) {
  size_t n = 0;
  char *save = NULL;
  char *url;
  snprintf(storage, storage_len, "%s", testing_env("REDMUTEX_TEST_URLS5"));
  for (url = strtok_r(storage, ",", &save); url != NULL && n < 5;
       url = strtok_r(NULL, ",", &save)) {
    urls[n++] = url;
  }
  return n;
}

/*
 * Forked children report a result code through shared memory, then wait for the parent to
 * kill them. So no exit handler runs twice, and valgrind does not leak-check the child:
 * there, memory that only the parent's other threads pointed to (threads a child does not
 * have) would look lost. Memory errors in children still fail the sanitizer run, where a
 * fault ends the child before it reports.
 */
struct child_results {
  volatile int code[16];
};

static inline struct child_results *child_results_new(void) {
  int i;
  struct child_results *r =
      mmap(NULL, sizeof *r, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (r == MAP_FAILED) return NULL;
  for (i = 0; i < 16; i++) r->code[i] = -1;
  return r;
}

static inline void child_results_free(struct child_results *r) { munmap(r, sizeof *r); }

/* In a child: records `code` (0 = every expectation held) in slot `i`, then waits to be
 * killed by child_wait. */
static inline void child_exit(struct child_results *r, int i, int code) {
  fflush(NULL);
  r->code[i] = code;
  for (;;) pause();
}

/* In the parent: waits (at most a minute) for child `pid` to report in slot `i`, kills it,
 * and returns the code; negative when it ended without reporting or never reported. */
static inline int child_wait(pid_t pid, struct child_results *r, int i) {
  int status = 0, waited = 0, code;
  while (r->code[i] == -1) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      fprintf(stderr, "child %ld ended without reporting (status %#x)\n", (long)pid, status);
      return -2;
    }
    if (waited >= 60000) {
      fprintf(stderr, "child %ld did not report within a minute\n", (long)pid);
      break;
    }
    sleep_ms(5);
    waited += 5;
  }
  code = r->code[i] == -1 ? -3 : r->code[i];
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return code;
}

#endif /* REDMUTEX_TESTS_SUPPORT_H */
