/*
 * For the tests of a round that ends without a frozen node, in C and C++: three nodes of
 * which two fail at once and the third, a server of its own (REDMUTEX_TEST_FREEZABLE_URL), is
 * frozen with SIGSTOP and thawed by its pid (REDMUTEX_TEST_FREEZABLE_PID); and a port that
 * refuses connections, for a node that is down.
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
#include <sys/types.h>
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

/* Makes the fence counter of `name` hold no number on the server at `url`: the acquire
 * script then fails there at once. */
static inline bool break_fence(const char *url, const char *name) {
  char fence[256];
  int n = snprintf(fence, sizeof fence, "{%s}:fence", name);
  return n > 0 && (size_t)n < sizeof fence && raw_set(url, fence, "x");
}

/* The freezable server's URL and pid. */
static inline const char *freezable_url(void) {
  return testing_env("REDMUTEX_TEST_FREEZABLE_URL");
}
static inline pid_t freezable_pid(void) {
  return (pid_t)atol(testing_env("REDMUTEX_TEST_FREEZABLE_PID"));
}

#endif /* REDMUTEX_TESTS_FROZEN_H */
