/* fork(): a child's copy of a held guard neither releases nor renews the parent's lock. */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "redmutex.h"
#include "support.h"
#include "testing.h"

/* In a child: on a failed expectation, report its number (and the library's message). */
#define EXPECT_IN_CHILD(cond, results, slot, code)                                        \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      fprintf(stderr, "child %ld: %s failed (%s)\n", (long)getpid(), #cond, last_error()); \
      child_exit(results, slot, code);                                                    \
    }                                                                                     \
  } while (0)

/* Two children free their copy of a held guard, one with redmutex_guard_free and one with
 * redmutex_unlock: neither may release the parent's lock. */
static void test_child_copy_never_releases(void) {
  char name[128];
  redmutex_client *client = test_client();
  redmutex_client *other = test_client();
  redmutex_guard *guard = NULL;
  redmutex_guard *second = NULL;
  struct child_results *results = child_results_new();
  bool locked = false;
  int how;
  CHECK(client != NULL && other != NULL && results != NULL);
  unique_name(name, sizeof name, "fork-release");
  /* Retry for a while: a short lease has a short node timeout, which a cold connection
   * (say, under valgrind) can miss. */
  CHECK_OK(redmutex_lock(client, name, 1000, 5000, &guard));

  for (how = 0; how < 2; how++) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
      /* The copy is not ours: not held, cannot be extended or checked, and freeing it
       * (either way) sends nothing to Redis. */
      EXPECT_IN_CHILD(!redmutex_guard_is_held(guard), results, how, 10);
      EXPECT_IN_CHILD(redmutex_guard_check(guard) == REDMUTEX_RESULT_NOT_HELD, results, how, 11);
      EXPECT_IN_CHILD(redmutex_guard_extend(guard, 60000) == REDMUTEX_RESULT_NOT_HELD, results, how,
                      12);
      if (how == 0) {
        redmutex_guard_free(guard);
      } else {
        EXPECT_IN_CHILD(redmutex_unlock(guard) == REDMUTEX_RESULT_NOT_HELD, results, how, 13);
        EXPECT_IN_CHILD(last_error_contains("fork"), results, how, 14);
      }
      redmutex_client_free(client);
      redmutex_client_free(other);
      child_exit(results, how, 0);
    }
    CHECK(child_wait(pid, results, how) == 0);
    CHECK(redmutex_guard_is_held(guard));
    CHECK_OK(redmutex_is_locked(other, name, &locked));
    CHECK(locked);
    CHECK_RESULT(redmutex_lock(other, name, 1000, 0, &second), REDMUTEX_RESULT_WOULD_BLOCK);
  }

  /* The parent keeps renewing its lock past the TTL, and releases it itself. */
  sleep_ms(1500);
  CHECK(redmutex_guard_is_held(guard));
  CHECK_RESULT(redmutex_lock(other, name, 1000, 0, &second), REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK_OK(redmutex_unlock(guard));
  CHECK_OK(redmutex_lock(other, name, 1000, 1000, &second));
  CHECK_OK(redmutex_unlock(second));
  redmutex_client_free(client);
  redmutex_client_free(other);
  child_results_free(results);
}

enum { SLOT_A = 0, SLOT_B = 1, SLOT_B_READY = 2, SLOT_B_PID = 3 };

/* A takes the lock (auto-renew on), forks B, then is killed holding it: renewal stops and
 * nothing releases it. B lives on with its copy of A's guard and is busy renewing a lock of
 * its own on its own renew thread; A's lock must still expire on time. */
static void test_child_copy_never_renews(void) {
  char name[128];
  char own[128];
  redmutex_client *waiter = test_client();
  redmutex_guard *guard = NULL;
  struct child_results *results = child_results_new();
  pid_t a, b;
  double a_died;
  CHECK(waiter != NULL && results != NULL);
  unique_name(name, sizeof name, "fork-renew");
  unique_name(own, sizeof own, "fork-renew-child");
  /* B is A's child; as subreaper this process can still wait for it once A is gone. */
  CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);

  a = fork();
  CHECK(a >= 0);
  if (a == 0) {
    redmutex_client *client = test_client();
    redmutex_guard *held = NULL;
    EXPECT_IN_CHILD(client != NULL, results, SLOT_A, 20);
    EXPECT_IN_CHILD(redmutex_lock(client, name, 600, 5000, &held) == REDMUTEX_RESULT_OK,
                    results, SLOT_A, 21);
    b = fork();
    EXPECT_IN_CHILD(b >= 0, results, SLOT_A, 22);
    if (b == 0) {
      /* As documented: after fork, the child makes its own client. */
      redmutex_client *mine_client = test_client();
      redmutex_guard *mine = NULL;
      bool lost = false;
      results->code[SLOT_B_PID] = (int)getpid();
      EXPECT_IN_CHILD(mine_client != NULL, results, SLOT_B, 30);
      EXPECT_IN_CHILD(!redmutex_guard_is_held(held), results, SLOT_B, 31);
      EXPECT_IN_CHILD(redmutex_guard_extend(held, 60000) == REDMUTEX_RESULT_NOT_HELD, results,
                      SLOT_B, 32);
      EXPECT_IN_CHILD(redmutex_lock(mine_client, own, 3000, 5000, &mine) == REDMUTEX_RESULT_OK,
                      results, SLOT_B, 33);
      results->code[SLOT_B_READY] = 1;
      EXPECT_IN_CHILD(redmutex_guard_wait_lost(mine, 3000, &lost) == REDMUTEX_RESULT_OK,
                      results, SLOT_B, 34);
      EXPECT_IN_CHILD(!lost, results, SLOT_B, 35);
      EXPECT_IN_CHILD(redmutex_unlock(mine) == REDMUTEX_RESULT_OK, results, SLOT_B, 36);
      redmutex_guard_free(held);
      redmutex_client_free(client);
      redmutex_client_free(mine_client);
      child_exit(results, SLOT_B, 0);
    }
    while (results->code[SLOT_B_READY] != 1 && results->code[SLOT_B] == -1) sleep_ms(5);
    /* child_wait kills A: a crash, with no release and no more renewal. */
    child_exit(results, SLOT_A, 0);
  }

  CHECK(child_wait(a, results, SLOT_A) == 0);
  a_died = now_ms();
  CHECK(results->code[SLOT_B_READY] == 1);
  /* The lease (600 ms) runs out although B still lives with a copy of the guard. */
  CHECK_OK(redmutex_lock(waiter, name, 30000, 5000, &guard));
  CHECK(now_ms() - a_died < 2500);
  CHECK(results->code[SLOT_B] == -1); /* B is still holding its own lock */
  CHECK_OK(redmutex_unlock(guard));
  /* B is this process's child now (subreaper). */
  CHECK(child_wait((pid_t)results->code[SLOT_B_PID], results, SLOT_B) == 0);
  CHECK(prctl(PR_SET_CHILD_SUBREAPER, 0) == 0);
  child_results_free(results);
  redmutex_client_free(waiter);
}

int main(void) {
  RUN(test_child_copy_never_releases);
#if defined(__SANITIZE_ADDRESS__)
  /* This test forks a process whose renew thread is running, and the child then starts
   * threads of its own. GCC 12's AddressSanitizer does not hold its allocator's locks across
   * fork(), so now and then the child's new thread waits forever on a lock that a parent
   * thread held at the fork (seen with gdb: __asan::Allocator::Allocate in the child's
   * thread start; never without ASan). It runs in the valgrind pass instead. */
  printf("skip test_child_copy_never_renews: AddressSanitizer's allocator is not fork-safe\n");
  (void)test_child_copy_never_renews;
#else
  RUN(test_child_copy_never_renews);
#endif
  return TESTING_SUMMARY();
}
