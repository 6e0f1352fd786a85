/*
 * The nightly invoice run, in C: three worker processes start the same job at the same
 * instant, and customers must get exactly one invoice. Each worker tries the lock once; the
 * one that gets it sends the invoices, passing its fence number along, and the others skip.
 *
 *   cc -std=c11 nightly_invoice.c $(pkg-config --cflags --libs redmutex) -o nightly_invoice
 *   ./nightly_invoice [REDIS_URL]       (else $REDMUTEX_URL, else redis://127.0.0.1:6379)
 *
 * Exits 0 when exactly one worker sent the invoices.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "redmutex.h"

#define LOCK_NAME "invoice:nightly:lock"
#define WORKERS 3

enum { SENT = 0, SKIPPED = 10, FAILED = 1 };

static const char *const CUSTOMERS[] = {"ACME Corp", "Globex", "Initech"};

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static void print_error(const char *who, const char *what, redmutex_result r) {
  char message[1024];
  size_t n = 0;
  redmutex_last_error_message(message, sizeof message, &n);
  fprintf(stderr, "%s: %s: %s (%s)\n", who, what, redmutex_result_name(r), message);
}

/* One server's cron job. `start` is the read end of a pipe that opens the gate for all. */
static int worker(const char *url, const char *who, int start) {
  const char *urls[1];
  redmutex_client_options *options = NULL;
  redmutex_client *client = NULL;
  redmutex_guard *guard = NULL;
  redmutex_result r;
  char gate;
  size_t i;
  int outcome = FAILED;

  urls[0] = url;
  /* The owner label makes `GET invoice:nightly:lock` in redis-cli name the holder. */
  if ((r = redmutex_client_options_new(&options)) != REDMUTEX_RESULT_OK ||
      (r = redmutex_client_options_set_owner(options, who)) != REDMUTEX_RESULT_OK ||
      (r = redmutex_client_new_with_options(urls, 1, options, &client)) != REDMUTEX_RESULT_OK) {
    print_error(who, "cannot make a client", r);
    redmutex_client_options_free(options);
    return FAILED;
  }
  redmutex_client_options_free(options);

  /* 02:00: every server's cron fires at the same instant. */
  if (read(start, &gate, 1) < 0) perror("read");

  /* One attempt (wait 0), with a 30 s lease that the library renews while we hold it. */
  r = redmutex_lock(client, LOCK_NAME, 30000, 0, &guard);
  if (r == REDMUTEX_RESULT_OK) {
    uint64_t fence = redmutex_guard_fence(guard);
    printf("%s: got the lock (fence %llu), sending invoices\n", who, (unsigned long long)fence);
    for (i = 0; i < sizeof CUSTOMERS / sizeof CUSTOMERS[0]; i++) {
      /* Still ours? Checked locally, no network. A real job would also hand the fence to
       * the billing database, which refuses writes with a fence older than one it saw. */
      if (redmutex_guard_check(guard) != REDMUTEX_RESULT_OK) {
        char why[256];
        size_t n;
        redmutex_last_error_message(why, sizeof why, &n); /* says why it was lost */
        fprintf(stderr, "%s: %s; stopping\n", who, why);
        break;
      }
      printf("%s:   invoice for %s (fence %llu)\n", who, CUSTOMERS[i],
             (unsigned long long)fence);
      fflush(stdout);
      sleep_ms(300);
    }
    outcome = i == sizeof CUSTOMERS / sizeof CUSTOMERS[0] ? SENT : FAILED;
    if ((r = redmutex_unlock(guard)) != REDMUTEX_RESULT_OK) { /* frees the guard either way */
      print_error(who, "unlock", r);
      outcome = FAILED;
    }
  } else if (r == REDMUTEX_RESULT_WOULD_BLOCK) {
    /* Who has it, for the log: the holder's value starts with its host:pid. */
    char holder[128] = "";
    size_t n = 0;
    int64_t ttl_ms = 0;
    uint64_t last_fence = 0;
    if (redmutex_status(client, LOCK_NAME, holder, sizeof holder, &n, &ttl_ms, &last_fence) !=
            REDMUTEX_RESULT_OK ||
        n == 0) {
      snprintf(holder, sizeof holder, "another server");
    }
    printf("%s: %s is sending tonight's invoices; skipped\n", who, holder);
    outcome = SKIPPED;
  } else {
    print_error(who, "cannot take the lock", r);
  }
  fflush(stdout);
  redmutex_client_free(client);
  return outcome;
}

int main(int argc, char **argv) {
  const char *url = argc > 1 ? argv[1] : getenv("REDMUTEX_URL");
  const char *names[WORKERS] = {"billing-1", "billing-2", "billing-3"};
  pid_t pids[WORKERS];
  int gate[2];
  int i, status, sent = 0, skipped = 0;

  if (url == NULL || url[0] == '\0') url = "redis://127.0.0.1:6379";
  printf("redmutex %s, redis %s\n", redmutex_version(), url);
  fflush(stdout);
  if (pipe(gate) != 0) {
    perror("pipe");
    return EXIT_FAILURE;
  }
  /* Fork before any client exists: each worker makes its own, as a separate server would. */
  for (i = 0; i < WORKERS; i++) {
    pids[i] = fork();
    if (pids[i] < 0) {
      perror("fork");
      return EXIT_FAILURE;
    }
    if (pids[i] == 0) {
      close(gate[1]);
      exit(worker(url, names[i], gate[0]));
    }
  }
  close(gate[0]);
  sleep_ms(200);  /* let every worker get to the gate */
  close(gate[1]); /* open it: all reads return at once */

  for (i = 0; i < WORKERS; i++) {
    if (waitpid(pids[i], &status, 0) != pids[i] || !WIFEXITED(status)) continue;
    sent += WEXITSTATUS(status) == SENT;
    skipped += WEXITSTATUS(status) == SKIPPED;
  }
  printf("%d worker sent the invoices, %d skipped\n", sent, skipped);
  return sent == 1 && skipped == WORKERS - 1 ? EXIT_SUCCESS : EXIT_FAILURE;
}
