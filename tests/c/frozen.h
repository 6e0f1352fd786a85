/*
 * For the tests of a round that ends without a frozen node, in C and C++: three nodes of
 * which two fail at once and the third, a server of its own (REDMUTEX_TEST_FREEZABLE_URL), is
 * frozen with SIGSTOP and thawed by its pid (REDMUTEX_TEST_FREEZABLE_PID); a port that
 * refuses connections, for a node that is down; and raw commands, for what a test breaks or
 * reads on a server.
 *
 * Include after testing.h; the test file defines _GNU_SOURCE before its first #include.
 */
#ifndef REDMUTEX_TESTS_FROZEN_H
#define REDMUTEX_TESTS_FROZEN_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "testing.h"

/* A loopback port that refuses connections: bound by us but never listening, so nobody else
 * can take it while the test runs. Returns the socket (close it after) or -1. */
static inline int closed_port(char *url, size_t url_len) {
  struct sockaddr_in addr;
  socklen_t len = sizeof addr;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
      getsockname(fd, (struct sockaddr *)&addr, &len) != 0) {
    close(fd);
    return -1;
  }
  snprintf(url, url_len, "redis://127.0.0.1:%u", (unsigned)ntohs(addr.sin_port));
  return fd;
}

/* Sends `SET key value` to the server at `url` (redis://127.0.0.1:PORT) on a socket of its
 * own; whether it answered +OK. The C API has no raw command. */
static inline bool raw_set(const char *url, const char *key, const char *value) {
  struct sockaddr_in addr;
  char cmd[512];
  char reply[8] = {0};
  unsigned port = 0;
  bool ok;
  int fd;
  int n;
  if (sscanf(url, "redis://127.0.0.1:%u", &port) != 1) return false;
  n = snprintf(cmd, sizeof cmd, "*3\r\n$3\r\nSET\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n", strlen(key),
               key, strlen(value), value);
  if (n < 0 || (size_t)n >= sizeof cmd) return false;
  fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons((uint16_t)port);
  ok = connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0 &&
       write(fd, cmd, (size_t)n) == (ssize_t)n && read(fd, reply, 5) == 5 &&
       memcmp(reply, "+OK\r\n", 5) == 0;
  close(fd);
  return ok;
}

/* Sends `COMMAND key` to the server at `url` (redis://127.0.0.1:PORT) on a socket of its own
 * and returns the number its reply holds: an integer reply (EXISTS), a bulk string of digits
 * (GET of a counter), or 0 for a nil one (GET of no key); -1 when it did not answer so within
 * a second. The C API has no raw command. */
static inline long long raw_number(const char *url, const char *command, const char *key) {
  struct sockaddr_in addr;
  struct timeval limit = {1, 0};
  char cmd[512];
  char reply[64];
  const char *line = NULL;
  const char *end = NULL;
  unsigned port = 0;
  size_t got = 0;
  bool whole = false;
  int fd;
  int n;
  if (sscanf(url, "redis://127.0.0.1:%u", &port) != 1) return -1;
  n = snprintf(cmd, sizeof cmd, "*2\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n", strlen(command),
               command, strlen(key), key);
  if (n < 0 || (size_t)n >= sizeof cmd) return -1;
  fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons((uint16_t)port);
  if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit) != 0 ||
      connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
      write(fd, cmd, (size_t)n) != (ssize_t)n) {
    close(fd);
    return -1;
  }
  /* A reply may come in pieces: read until it is whole (one line, or a bulk string's two). */
  while (!whole && got < sizeof reply - 1) {
    ssize_t r = read(fd, reply + got, sizeof reply - 1 - got);
    if (r <= 0) break;
    got += (size_t)r;
    reply[got] = '\0';
    end = strstr(reply, "\r\n");
    whole = end != NULL && (reply[0] != '$' || reply[1] == '-' || strstr(end + 2, "\r\n"));
  }
  close(fd);
  if (!whole) return -1;
  if (reply[0] == ':') line = reply + 1;
  if (reply[0] == '$') line = reply[1] == '-' ? "0" : end + 2;
  return line == NULL ? -1 : strtoll(line, NULL, 10);
}

/* Makes the fence counter of `name` hold no number on the server at `url`: the acquire
 * script then fails there at once. */
static inline bool break_fence(const char *url, const char *name) {
  char fence[256];
  int n = snprintf(fence, sizeof fence, "{%s}:fence", name);
  return n > 0 && (size_t)n < sizeof fence && raw_set(url, fence, "x");
}

/* Sends SIGSTOP to `pid` and waits, at most a second, until the process is stopped (a signal
 * sent is not yet a process stopped: a request written in between could still be answered).
 * Whether it is; thaw it with SIGCONT either way. */
static inline bool freeze(pid_t pid) {
  char path[64];
  char line[512];
  struct timespec tick = {0, 1000000L};
  int tries;
  snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
  if (kill(pid, SIGSTOP) != 0) return false;
  for (tries = 0; tries < 1000; tries++) {
    FILE *f = fopen(path, "r");
    size_t n = 0;
    const char *state;
    if (f == NULL) return false;
    n = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[n] = '\0';
    /* "pid (name) S ...": the state follows the last parenthesis. */
    state = strrchr(line, ')');
    if (state != NULL && state[1] == ' ' && (state[2] == 'T' || state[2] == 't')) return true;
    nanosleep(&tick, NULL);
  }
  return false;
}

/* The freezable server's URL and pid. */
static inline const char *freezable_url(void) {
  return testing_env("REDMUTEX_TEST_FREEZABLE_URL");
}
static inline pid_t freezable_pid(void) {
  return (pid_t)atol(testing_env("REDMUTEX_TEST_FREEZABLE_PID"));
}

#endif /* REDMUTEX_TESTS_FROZEN_H */
