/* redmutex_guard_release: the owner ends a watchdog thread's redmutex_guard_wait_lost, then
 * joins it and frees the guard. And on-lost callbacks that register more callbacks. Every
 * wait is bounded: a hang is killed by alarm() and fails the program. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "redmutex.h"
#include "support.h"
#include "testing.h"

struct watchdog {
  const redmutex_guard *guard;
  redmutex_result result;
  bool lost;
  atomic_int waiting;
  double returned_ms;
};

static void *watch(void *arg) {
  struct watchdog *w = arg;
  atomic_store(&w->waiting, 1);
  /* A minute: far longer than the test may take, so only the release can end it. */
  w->result = redmutex_guard_wait_lost(w->guard, 60000, &w->lost);
  w->returned_ms = now_ms();
  return NULL;
}

static void test_release_ends_a_watchdog_wait(void) {
  char name[128];
  redmutex_client *client = test_client();
  redmutex_client *other = test_client();
  redmutex_guard *guard = NULL;
  redmutex_guard *next = NULL;
  struct watchdog w;
  pthread_t thread;
  double released_ms;
  bool lost = true;
  CHECK(client != NULL && other != NULL);
  unique_name(name, sizeof name, "release-watchdog");
  memset(&w, 0, sizeof w);
  w.result = REDMUTEX_RESULT_OTHER;

  CHECK_OK(redmutex_lock(client, name, 30000, 0, &guard));
  w.guard = guard;
  CHECK(pthread_create(&thread, NULL, watch, &w) == 0);
  while (!atomic_load(&w.waiting)) sleep_ms(1);
  sleep_ms(50); /* let it block in the wait */

  released_ms = now_ms();
  CHECK_OK(redmutex_guard_release(guard));
  CHECK(pthread_join(thread, NULL) == 0);
  CHECK_OK(w.result);
  CHECK(!w.lost);                            /* released, not lost */
  CHECK(w.returned_ms - released_ms < 5000); /* woken by the release, not the minute */

  /* The handle stays valid: it answers, and says it no longer holds the lock. */
  CHECK(!redmutex_guard_is_held(guard));
  CHECK_RESULT(redmutex_guard_check(guard), REDMUTEX_RESULT_NOT_HELD);
  CHECK_OK(redmutex_guard_wait_lost(guard, 60000, &lost));
  CHECK(!lost);
  CHECK_RESULT(redmutex_guard_release(guard), REDMUTEX_RESULT_NOT_HELD);
  /* The lock is free in Redis at once. */
  CHECK_OK(redmutex_lock(other, name, 30000, 0, &next));
  CHECK_OK(redmutex_unlock(next));

  redmutex_guard_free(guard);
  redmutex_client_free(other);
  redmutex_client_free(client);
}

static void test_release_rejects_null(void) {
  CHECK_RESULT(redmutex_guard_release(NULL), REDMUTEX_RESULT_NULL_PARAMETER);
}

struct chain {
  const redmutex_guard *guard;
  atomic_int first;
  atomic_int second;
  redmutex_result registered;
};

static void second_callback(void *user_data) {
  struct chain *c = user_data;
  atomic_fetch_add(&c->second, 1);
}

/* Registers another callback on its own, already lost, guard. */
static void first_callback(void *user_data) {
  struct chain *c = user_data;
  atomic_fetch_add(&c->first, 1);
  c->registered = redmutex_guard_on_lost(c->guard, second_callback, c);
}

/* A lost callback registers another on its own guard. `lost_first`: the guard is already
 * lost when the first is registered, so both run at once on this thread; else the renew
 * thread finds the loss and runs them. */
static void check_callback_chain(bool lost_first) {
  char name[128];
  redmutex_client *client = test_client();
  redmutex_guard *guard = NULL;
  struct chain c;
  bool lost = false;
  int waited;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "callback-chain");
  memset(&c, 0, sizeof c);
  c.registered = REDMUTEX_RESULT_OTHER;

  CHECK_OK(lock_unrenewed(client, name, 200, &guard));
  c.guard = guard;
  if (lost_first) {
    CHECK_OK(redmutex_guard_wait_lost(guard, 5000, &lost));
    CHECK(lost);
  }
  CHECK_OK(redmutex_guard_on_lost(guard, first_callback, &c));
  if (lost_first) CHECK(atomic_load(&c.second) == 1); /* before on_lost returned */
  for (waited = 0; atomic_load(&c.second) == 0 && waited < 5000; waited += 10) sleep_ms(10);
  CHECK(atomic_load(&c.first) == 1);
  CHECK(atomic_load(&c.second) == 1);
  CHECK_OK(c.registered);

  redmutex_guard_free(guard);
  redmutex_client_free(client);
}

static void test_lost_callback_may_register_another_on_the_renew_thread(void) {
  check_callback_chain(false);
}

static void test_lost_callback_may_register_another_on_the_callers_thread(void) {
  check_callback_chain(true);
}

int main(void) {
  alarm(120); /* a deadlock fails the program instead of hanging the suite */
  RUN(test_release_ends_a_watchdog_wait);
  RUN(test_release_rejects_null);
  RUN(test_lost_callback_may_register_another_on_the_renew_thread);
  RUN(test_lost_callback_may_register_another_on_the_callers_thread);
  return TESTING_SUMMARY();
}
