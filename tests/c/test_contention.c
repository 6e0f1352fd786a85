/* Mutual exclusion under contention: threads sharing one client, and processes (fork) with
 * a client each. Each holder does a slow read-modify-write of a plain counter and flags
 * overlapping holders, so a lock that let two in would lose increments or be caught. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "redmutex.h"
#include "support.h"
#include "testing.h"

/* The state the lock protects. In the process test it lives in a shared mapping. */
struct protected_state {
  int counter;   /* incremented non-atomically, with a pause between read and write */
  int inside;    /* holders inside right now: never more than one */
  int overlaps;  /* times a holder found someone else inside */
  int failures;  /* lock or unlock calls that did not return OK */
};

/* One turn: lock, slow increment, unlock. Returns false if a call failed. */
static bool one_turn(redmutex_client *client, const char *name, struct protected_state *s) {
  redmutex_guard *guard = NULL;
  int seen;
  if (redmutex_lock(client, name, 10000, -1, &guard) != REDMUTEX_RESULT_OK) {
    fprintf(stderr, "lock: %s\n", last_error());
    return false;
  }
  if (s->inside++ != 0) s->overlaps++;
  seen = s->counter;
  sleep_ms(1); /* widen the window a second holder would fall into */
  s->counter = seen + 1;
  s->inside--;
  if (!redmutex_guard_is_held(guard)) s->overlaps++;
  if (redmutex_unlock(guard) != REDMUTEX_RESULT_OK) {
    fprintf(stderr, "unlock: %s\n", last_error());
    return false;
  }
  return true;
}

enum { THREADS = 4, THREAD_TURNS = 15, PROCESSES = 3, PROCESS_TURNS = 12 };

struct worker {
  redmutex_client *client;
  const char *name;
  struct protected_state *state;
  pthread_mutex_t *failures_mutex;
};

static void *thread_worker(void *p) {
  struct worker *w = p;
  int i;
  for (i = 0; i < THREAD_TURNS; i++) {
    if (!one_turn(w->client, w->name, w->state)) {
      pthread_mutex_lock(w->failures_mutex);
      w->state->failures++;
      pthread_mutex_unlock(w->failures_mutex);
    }
  }
  return NULL;
}

static void test_threads_sharing_a_client_exclude_each_other(void) {
  char name[128];
  struct protected_state state = {0, 0, 0, 0};
  pthread_mutex_t failures_mutex = PTHREAD_MUTEX_INITIALIZER;
  pthread_t threads[THREADS];
  struct worker worker;
  int i;
  redmutex_client *client = test_client();
  CHECK(client != NULL);
  unique_name(name, sizeof name, "threads");
  worker.client = client;
  worker.name = name;
  worker.state = &state;
  worker.failures_mutex = &failures_mutex;

  for (i = 0; i < THREADS; i++) CHECK(pthread_create(&threads[i], NULL, thread_worker, &worker) == 0);
  for (i = 0; i < THREADS; i++) CHECK(pthread_join(threads[i], NULL) == 0);
  CHECK(state.failures == 0);
  CHECK(state.overlaps == 0);
  CHECK(state.counter == THREADS * THREAD_TURNS);
  redmutex_client_free(client);
}

static void test_processes_exclude_each_other(void) {
  char name[128];
  pid_t children[PROCESSES];
  int i;
  struct child_results *results = child_results_new();
  struct protected_state *state =
      mmap(NULL, sizeof *state, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(state != MAP_FAILED && results != NULL);
  memset(state, 0, sizeof *state);
  unique_name(name, sizeof name, "processes");

  for (i = 0; i < PROCESSES; i++) {
    children[i] = fork();
    CHECK(children[i] >= 0);
    if (children[i] == 0) {
      /* Each process makes its own client after fork. */
      int turn, failed = 0;
      redmutex_client *client = test_client();
      if (client == NULL) child_exit(results, i, 2);
      for (turn = 0; turn < PROCESS_TURNS; turn++) failed |= !one_turn(client, name, state);
      redmutex_client_free(client);
      child_exit(results, i, failed ? 1 : 0);
    }
  }
  for (i = 0; i < PROCESSES; i++) CHECK(child_wait(children[i], results, i) == 0);
  CHECK(state->overlaps == 0);
  CHECK(state->counter == PROCESSES * PROCESS_TURNS);
  CHECK(munmap(state, sizeof *state) == 0);
  child_results_free(results);
}

int main(void) {
  RUN(test_threads_sharing_a_client_exclude_each_other);
  RUN(test_processes_exclude_each_other);
  return TESTING_SUMMARY();
}
