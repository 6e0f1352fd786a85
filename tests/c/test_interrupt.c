/* An interrupt descriptor that ends every wait of a lock call, not only a wait for a release
 * (redmutex_lock_options_set_interrupt_every_wait), against the freezable server frozen with
 * SIGSTOP while a round waits for its reply. When the descriptor becomes readable and the
 * interrupt check says stop, the call ends at once, long before its node timeout, and what
 * its request stores when the server wakes is undone behind it; when the check says go on,
 * the call waits for the reply as if nothing had happened. Without every_wait, the
 * descriptor leaves a read of a reply alone. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "redmutex.h"
#include "support.h"
#include "testing.h"
#include "frozen.h"

/* The node timeout of these tests' client: far beyond what a call ended by its descriptor
 * takes, so that a call that ends early was not ended by its time running out. */
enum { NODE_TIMEOUT_MS = 5000 };

/* A self-pipe, as a signal handler would write to, and what the tests' threads and the
 * interrupt check share. */
struct poke {
  /* The read end does not block: the check drains it, and may run when it is empty. */
  int fds[2];
  pid_t server;
  /* Set just before the byte is written. */
  atomic_bool poked;
  /* How often the interrupt check ran. */
  atomic_int checks;
  /* Set just before the server is sent SIGCONT. */
  atomic_bool resumed;
  /* Whether the resuming thread waits for the check to have run, not only for the poke. */
  bool resume_after_check;
};

static bool poke_open(struct poke *p, pid_t server) {
  memset(p, 0, sizeof *p);
  p->server = server;
  if (pipe(p->fds) != 0) return false;
  if (fcntl(p->fds[0], F_SETFL, O_NONBLOCK) == 0) return true;
  close(p->fds[0]);
  close(p->fds[1]);
  return false;
}

/* Closes the pipe, the write end last of all: once it is closed, the read end stays readable
 * for good. */
static void poke_close(struct poke *p) {
  close(p->fds[0]);
  close(p->fds[1]);
}

static void drain(struct poke *p) {
  char buf[16];
  while (read(p->fds[0], buf, sizeof buf) > 0) {
  }
  atomic_fetch_add(&p->checks, 1);
}

/* The interrupt check of a call that should stop: it drains the pipe and stops once the
 * byte was written. */
static bool stop_when_poked(void *user_data) {
  struct poke *p = user_data;
  drain(p);
  return atomic_load(&p->poked);
}

/* The interrupt check of a call that should go on (a signal whose handler did not ask to
 * stop): it drains the pipe, so that the wait can go on. */
static bool go_on(void *user_data) {
  drain(user_data);
  return false;
}

static void *poke_after_100ms(void *arg) {
  struct poke *p = arg;
  sleep_ms(100);
  atomic_store(&p->poked, true);
  if (write(p->fds[1], "!", 1) != 1) atomic_store(&p->poked, false);
  return NULL;
}

/* Thaws the server some 300 ms after the poke (or after the check it caused), so that the
 * call has had that long to end early: at most 3 s after starting whatever happened. */
static void *resume_after_the_poke(void *arg) {
  struct poke *p = arg;
  double until = now_ms() + 3000;
  while (!(atomic_load(&p->poked) && (!p->resume_after_check || atomic_load(&p->checks) > 0)) &&
         now_ms() < until) {
    sleep_ms(1);
  }
  sleep_ms(300);
  atomic_store(&p->resumed, true);
  kill(p->server, SIGCONT);
  return NULL;
}

/* A client of the freezable server with a node timeout of NODE_TIMEOUT_MS and a pooled
 * connection (a lock on `name` taken and released), so that a round is written at once while
 * the server is frozen. Writes that lock's fence to `*fence`; NULL when anything failed. */
static redmutex_client *warm_client(const char *name, uint64_t *fence) {
  const char *url = freezable_url();
  redmutex_client_options *options = NULL;
  redmutex_client *client = NULL;
  redmutex_guard *guard = NULL;
  if (redmutex_client_options_new(&options) != REDMUTEX_RESULT_OK) return NULL;
  redmutex_client_options_set_node_timeout(options, NODE_TIMEOUT_MS);
  if (redmutex_client_new_with_options(&url, 1, options, &client) != REDMUTEX_RESULT_OK) {
    fprintf(stderr, "client: %s\n", last_error());
    client = NULL;
  }
  redmutex_client_options_free(options);
  if (client != NULL && redmutex_lock(client, name, 30000, 0, &guard) == REDMUTEX_RESULT_OK) {
    *fence = redmutex_guard_fence(guard);
    if (redmutex_unlock(guard) == REDMUTEX_RESULT_OK) return client;
  }
  fprintf(stderr, "warm-up: %s\n", last_error());
  redmutex_client_free(client);
  return NULL;
}

/* Lock options with `check` as the interrupt check, the pipe's read end as the interrupt
 * descriptor, and `every_wait`; NULL when anything failed. */
static redmutex_lock_options *options_of(redmutex_interrupt_callback check, struct poke *p,
                                         bool every_wait) {
  redmutex_lock_options *options = NULL;
  if (redmutex_lock_options_new(&options) != REDMUTEX_RESULT_OK) return NULL;
  if (redmutex_lock_options_set_ttl(options, 30000) == REDMUTEX_RESULT_OK &&
      redmutex_lock_options_set_interrupt(options, check, p) == REDMUTEX_RESULT_OK &&
      redmutex_lock_options_set_interrupt_fd(options, p->fds[0]) == REDMUTEX_RESULT_OK &&
      redmutex_lock_options_set_interrupt_every_wait(options, every_wait) == REDMUTEX_RESULT_OK) {
    return options;
  }
  redmutex_lock_options_free(options);
  return NULL;
}

/* A lock call on `name` that waits at most `wait_ms` while the server is frozen, with `p`'s
 * threads poking the pipe after 100 ms and, when `resume` says so, thawing the server after
 * that. The server is
 * thawed when this returns (by the thread or at the end); `*frozen` says whether it was
 * frozen at all, `*took` how long the call ran (ms) and `*resumed_first` whether the server
 * had been thawed when it returned. Returns the call's result, after printing its message
 * when it is not `expected`. */
static redmutex_result attempt_frozen(redmutex_client *client, const char *name,
                                      const redmutex_lock_options *options, int64_t wait_ms,
                                      struct poke *p, bool resume, redmutex_result expected,
                                      redmutex_guard **guard, bool *frozen, double *took,
                                      bool *resumed_first) {
  pthread_t poker, resumer;
  bool poking = false, resuming = false;
  redmutex_result got = REDMUTEX_RESULT_NULL_PARAMETER;
  double started;
  *frozen = freeze(p->server);
  if (*frozen) poking = pthread_create(&poker, NULL, poke_after_100ms, p) == 0;
  if (poking && resume) resuming = pthread_create(&resumer, NULL, resume_after_the_poke, p) == 0;
  if (poking && resume == resuming) {
    started = now_ms();
    got = redmutex_lock_with_options(client, (const uint8_t *)name, strlen(name), options,
                                     wait_ms, guard);
    *took = now_ms() - started;
    *resumed_first = atomic_load(&p->resumed);
    if (got != expected) fprintf(stderr, "the frozen attempt: %s\n", last_error());
  }
  if (poking) pthread_join(poker, NULL);
  if (resuming) pthread_join(resumer, NULL);
  kill(p->server, SIGCONT);
  if (!poking || resume != resuming) *frozen = false;
  return got;
}

/* Polls, at most 3 s, until the server ran the frozen round's request (the fence counter
 * moved past `fence`, the warm-up's) and the undo written behind it (the lock key is gone). */
static bool undone_on_the_server(const char *name, uint64_t fence) {
  char fence_key[192];
  long long counter = -1, exists = -1;
  double until = now_ms() + 3000;
  snprintf(fence_key, sizeof fence_key, "{%s}:fence", name);
  for (;;) {
    counter = raw_number(freezable_url(), "GET", fence_key);
    exists = raw_number(freezable_url(), "EXISTS", name);
    if (counter > (long long)fence && exists == 0) return true;
    if (now_ms() >= until) break;
    sleep_ms(5);
  }
  fprintf(stderr, "after 3 s: fence %lld (the warm-up's %llu), lock key exists: %lld\n", counter,
          (unsigned long long)fence, exists);
  return false;
}

/* What one lock call against the frozen server did (see `run_frozen`). */
struct outcome {
  bool made, frozen, resumed_first, taken, undone, poked;
  redmutex_result got, unlocked;
  int checks;
  double took;
};

/* Sets up a warm client and lock options (`check`, the pipe, `every_wait`), freezes the
 * server and makes one lock call on a fresh name that waits at most `wait_ms`, poked after
 * 100 ms and, with `resume`, thawed some 300 ms after the poke (after the check it caused,
 * with `resume_after_check`). A guard it got is unlocked; with `look_for_undo`, the server is
 * then asked whether the round's request ran and its undo after it. Everything is freed
 * before the caller's first check, so that a failure leaves no server frozen. */
static struct outcome run_frozen(const char *what, redmutex_interrupt_callback check,
                                 bool every_wait, int64_t wait_ms, bool resume,
                                 bool resume_after_check, redmutex_result expected,
                                 bool look_for_undo) {
  struct outcome o = {.got = REDMUTEX_RESULT_NULL_PARAMETER,
                      .unlocked = REDMUTEX_RESULT_NULL_PARAMETER};
  char name[128];
  struct poke p;
  redmutex_client *client = NULL;
  redmutex_lock_options *options = NULL;
  redmutex_guard *guard = NULL;
  uint64_t fence = 0;
  pid_t server = freezable_pid();
  if (server <= 1 || !poke_open(&p, server)) return o;
  p.resume_after_check = resume_after_check;
  unique_name(name, sizeof name, what);
  client = warm_client(name, &fence);
  options = options_of(check, &p, every_wait);
  o.made = client != NULL && options != NULL;
  if (o.made) {
    o.got = attempt_frozen(client, name, options, wait_ms, &p, resume, expected, &guard,
                           &o.frozen, &o.took, &o.resumed_first);
  }
  if (o.frozen && look_for_undo) o.undone = undone_on_the_server(name, fence);
  o.taken = guard != NULL;
  if (o.taken) o.unlocked = redmutex_unlock(guard);
  redmutex_lock_options_free(options);
  redmutex_client_free(client);
  o.checks = atomic_load(&p.checks);
  o.poked = atomic_load(&p.poked);
  poke_close(&p);
  return o;
}

/* The interrupt check says stop while the round waits for a frozen server's reply: the call
 * ends at once with REDMUTEX_RESULT_INTERRUPTED, not at its 5 s node timeout, and when the
 * server wakes, it runs the request and then the undo written behind it, so nothing stays
 * held. One attempt: a round so stopped ends the call as interrupted, not with the round's
 * own error (its node timed out). */
static void test_every_wait_stops_a_read_from_a_frozen_server(void) {
  struct outcome o = run_frozen("every-wait-stop", stop_when_poked, true, 0, false, false,
                                REDMUTEX_RESULT_INTERRUPTED, true);
  printf("     ended %.0f ms into a read of a frozen server\n", o.took);
  CHECK(o.made);
  CHECK(o.frozen);
  CHECK(o.got == REDMUTEX_RESULT_INTERRUPTED);
  CHECK(!o.taken);
  CHECK(o.checks >= 1);
  /* Ended by the descriptor, some 100 ms in: well before the 5 s node timeout. */
  CHECK(o.took < 2000);
  CHECK(o.undone);
}

/* The interrupt check drains the pipe and says go on: the call's one attempt keeps waiting
 * for the frozen server's reply, and takes the lock once the server is thawed some 300 ms
 * after the check. */
static void test_every_wait_goes_on_when_the_check_says_so(void) {
  struct outcome o =
      run_frozen("every-wait-go-on", go_on, true, 0, true, true, REDMUTEX_RESULT_OK, false);
  printf("     took the lock %.0f ms in, once the server was thawed\n", o.took);
  CHECK(o.made);
  CHECK(o.frozen);
  CHECK(o.got == REDMUTEX_RESULT_OK);
  CHECK(o.checks >= 1);
  CHECK(o.resumed_first);
  CHECK(o.took < NODE_TIMEOUT_MS);
  CHECK(o.unlocked == REDMUTEX_RESULT_OK);
}

/* The control: without every_wait, the same call (the same wait, descriptor and check, which
 * would say stop) leaves the read alone. The check is not even asked, and the call takes the
 * lock once the server is thawed, some 300 ms after the poke. */
static void test_without_every_wait_a_read_is_not_interrupted(void) {
  struct outcome o = run_frozen("every-wait-off", stop_when_poked, false, 10000, true, false,
                                REDMUTEX_RESULT_OK, false);
  printf("     took the lock %.0f ms in, once the server was thawed\n", o.took);
  CHECK(o.made);
  CHECK(o.frozen);
  CHECK(o.got == REDMUTEX_RESULT_OK);
  CHECK(o.poked);
  CHECK(o.checks == 0);
  CHECK(o.resumed_first);
  CHECK(o.unlocked == REDMUTEX_RESULT_OK);
}

int main(void) {
  RUN(test_every_wait_stops_a_read_from_a_frozen_server);
  RUN(test_every_wait_goes_on_when_the_check_says_so);
  RUN(test_without_every_wait_a_read_is_not_interrupted);
  return TESTING_SUMMARY();
}
