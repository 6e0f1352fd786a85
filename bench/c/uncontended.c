/*
 * The C binding's uncontended row: redmutex_lock (one attempt) + redmutex_unlock of a free
 * lock, timed with CLOCK_MONOTONIC. Compiled and run by the Rust bench (bench/src/external.rs)
 * against include/redmutex.h and the libredmutex built next to the bench binary.
 *
 *     uncontended URL N    prints {"samples_ns":[...]} on stdout
 *     uncontended URL wait MS
 *         a waiter for the bench's blocked-waiter row: waits 300 ms, then 50 ms, for the held
 *         lock `bench:waiters` (its first connections, the one that ends a wait still blocked
 *         at its deadline among them: see bench/src/phase/waiters.rs), prints "ready", and
 *         after a line on stdin
 *         waits MS ms more, then prints "done"
 *     uncontended URL fleet THREADS LOCKS PATIENCE_MS
 *         the bench's fleet case: THREADS threads of one client wait (at most PATIENCE_MS) on
 *         the locks `bench:fleet:c:LOCKS:I`, I = thread % LOCKS, held by the bench; prints
 *         "ready" once every thread started, then, when all are done,
 *         {"failed":F,"last_ns":T}, T the last grant's CLOCK_MONOTONIC time
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "redmutex.h"

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int once(redmutex_client *client, const char *name) {
    redmutex_guard *guard = NULL;
    /* TTL 30 s as every row; wait 0: one attempt. */
    if (redmutex_lock(client, name, 30000, 0, &guard) != REDMUTEX_RESULT_OK) {
        return -1;
    }
    return redmutex_unlock(guard) == REDMUTEX_RESULT_OK ? 0 : -1;
}

/* The blocked-waiter mode: see the top of the file. */
static int wait_mode(const char *url, long ms) {
    const char *urls[] = {url};
    redmutex_client *client = NULL;
    redmutex_guard *guard = NULL;
    char line[16];
    if (redmutex_client_new(urls, 1, &client) != REDMUTEX_RESULT_OK) {
        return 1;
    }
    if (redmutex_lock(client, "bench:waiters", 30000, 300, &guard) != REDMUTEX_RESULT_WOULD_BLOCK ||
        redmutex_lock(client, "bench:waiters", 30000, 50, &guard) != REDMUTEX_RESULT_WOULD_BLOCK) {
        fprintf(stderr, "the waiter got a lock that should be held\n");
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    if (fgets(line, sizeof line, stdin) == NULL) {
        return 1;
    }
    if (redmutex_lock(client, "bench:waiters", 30000, (int64_t)ms, &guard) !=
        REDMUTEX_RESULT_WOULD_BLOCK) {
        return 1;
    }
    printf("done\n");
    fflush(stdout);
    redmutex_client_free(client);
    return 0;
}

/* The fleet mode: see the top of the file. */
struct fleet_waiter {
    redmutex_client *client;
    char name[64];
    int64_t patience_ms;
    int ok;
    uint64_t granted_ns;
};

static void *fleet_wait(void *arg) {
    struct fleet_waiter *w = arg;
    redmutex_guard *guard = NULL;
    if (redmutex_lock(w->client, w->name, 30000, w->patience_ms, &guard) == REDMUTEX_RESULT_OK) {
        w->granted_ns = mono_ns();
        w->ok = redmutex_unlock(guard) == REDMUTEX_RESULT_OK;
    }
    return NULL;
}

static int fleet_mode(const char *url, long threads, long locks, long patience_ms) {
    const char *urls[] = {url};
    redmutex_client *client = NULL;
    if (threads < 1 || locks < 1 || redmutex_client_new(urls, 1, &client) != REDMUTEX_RESULT_OK) {
        return 1;
    }
    struct fleet_waiter *w = calloc((size_t)threads, sizeof *w);
    pthread_t *t = calloc((size_t)threads, sizeof *t);
    pthread_attr_t attr;
    if (w == NULL || t == NULL || pthread_attr_init(&attr) != 0 ||
        pthread_attr_setstacksize(&attr, 256 * 1024) != 0) {
        return 1;
    }
    for (long i = 0; i < threads; i++) {
        w[i].client = client;
        w[i].patience_ms = patience_ms;
        snprintf(w[i].name, sizeof w[i].name, "bench:fleet:c:%ld:%ld", locks, i % locks);
        if (pthread_create(&t[i], &attr, fleet_wait, &w[i]) != 0) {
            fprintf(stderr, "cannot start thread %ld\n", i);
            return 1;
        }
    }
    printf("ready\n");
    fflush(stdout);
    long failed = 0;
    uint64_t last = 0;
    for (long i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        failed += !w[i].ok;
        last = w[i].granted_ns > last ? w[i].granted_ns : last;
    }
    printf("{\"failed\":%ld,\"last_ns\":%llu}\n", failed, (unsigned long long)last);
    fflush(stdout);
    free(w);
    free(t);
    redmutex_client_free(client);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 6) {
        return fleet_mode(argv[1], strtol(argv[3], NULL, 10), strtol(argv[4], NULL, 10),
                          strtol(argv[5], NULL, 10));
    }
    if (argc == 4) {
        return wait_mode(argv[1], strtol(argv[3], NULL, 10));
    }
    if (argc != 3) {
        fprintf(stderr, "usage: %s URL N\n", argv[0]);
        return 2;
    }
    const char *urls[] = {argv[1]};
    long n = strtol(argv[2], NULL, 10);
    const char *name = "bench:uncontended:c";
    redmutex_client *client = NULL;
    if (redmutex_client_new(urls, 1, &client) != REDMUTEX_RESULT_OK) {
        fprintf(stderr, "redmutex_client_new failed\n");
        return 1;
    }
    uint64_t *samples = calloc((size_t)(n > 0 ? n : 1), sizeof *samples);
    if (samples == NULL) {
        return 1;
    }
    for (int i = 0; i < 50; i++) {
        if (once(client, name) != 0) {
            fprintf(stderr, "lock/unlock failed during warm-up\n");
            return 1;
        }
    }
    for (long i = 0; i < n; i++) {
        uint64_t t = mono_ns();
        if (once(client, name) != 0) {
            fprintf(stderr, "lock/unlock failed\n");
            return 1;
        }
        samples[i] = mono_ns() - t;
    }
    printf("{\"samples_ns\":[");
    for (long i = 0; i < n; i++) {
        printf("%s%llu", i ? "," : "", (unsigned long long)samples[i]);
    }
    printf("]}\n");
    free(samples);
    redmutex_client_free(client);
    return 0;
}
