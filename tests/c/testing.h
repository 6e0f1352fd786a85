/*
 * A minimal test harness for the C and C++ tests, so they need nothing beyond a compiler.
 *
 * Convention: tests/c/test_*.c (and test_*.cpp) each hold `static void test_x(void)`
 * functions and a main that RUNs each of them and ends with `return TESTING_SUMMARY();`.
 * scripts/test-c.sh builds and runs every such file, with sanitizers and under valgrind.
 *
 * Redis: REDMUTEX_TEST_URL names one running server, REDMUTEX_TEST_URLS5 five of them
 * (comma-separated) for Redlock, REDMUTEX_TEST_CLUSTER_URL a three-master Redis Cluster
 * (redis+cluster://...); scripts/test-c.sh starts them and sets all three.
 */
#ifndef REDMUTEX_TESTS_TESTING_H
#define REDMUTEX_TESTS_TESTING_H

#include <stdio.h>
#include <stdlib.h>

/*
 * The per-request node timeout of the tests' clients, in milliseconds. The library's default
 * for a 30 s lease is 250 ms, a bound a stall of a loaded two-CPU machine can reach while
 * valgrind runs the client many times slower (a wait of 200 ms once failed with "no answer in
 * time"). A test whose point is a timeout sets its own.
 */
#define TEST_NODE_TIMEOUT_MS 1000

static int testing_current_failed;
static int testing_passed;
static int testing_failed;

/* Fails the running test and returns from it, so later checks can rely on earlier ones. */
#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);     \
      testing_current_failed = 1;                                                    \
      return;                                                                        \
    }                                                                                \
  } while (0)

#define RUN(test)                                \
  do {                                           \
    testing_current_failed = 0;                  \
    test();                                      \
    if (testing_current_failed) {                \
      testing_failed++;                          \
      printf("FAIL %s\n", #test);                \
    } else {                                     \
      testing_passed++;                          \
      printf("ok   %s\n", #test);                \
    }                                            \
    fflush(stdout);                              \
  } while (0)

#define TESTING_SUMMARY()                                                   \
  (printf("%d passed, %d failed\n", testing_passed, testing_failed),        \
   testing_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE)

/* The environment variable `name`, or exit with a message: a test cannot pick a default
 * server without risking someone's real Redis. */
static inline const char *testing_env(const char *name) {
  const char *value = getenv(name);
  if (value == NULL || value[0] == '\0') {
    fprintf(stderr, "%s is not set; run the C tests through scripts/test-c.sh\n", name);
    exit(EXIT_FAILURE);
  }
  return value;
}

#endif /* REDMUTEX_TESTS_TESTING_H */
