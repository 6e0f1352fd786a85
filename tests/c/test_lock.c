/* Taking and releasing a lock through the C API against one real redis-server. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "redmutex.h"
#include "support.h"
#include "testing.h"

/* What each node runs: empty before the first connection, then the server and its version;
 * an index past the client's nodes is an invalid argument, which ends a loop over them. */
static void test_client_server_says_what_each_node_runs(void) {
  char name[128];
  char server[64];
  size_t n = 1;
  redmutex_client *client = test_client();
  redmutex_guard *guard = NULL;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "servers");
  CHECK_OK(redmutex_client_server(client, 0, server, sizeof server, &n));
  CHECK(n == 0 && server[0] == '\0');
  CHECK_OK(redmutex_lock(client, name, 30000, -1, &guard));
  CHECK_OK(redmutex_unlock(guard));
  CHECK_OK(redmutex_client_server(client, 0, server, sizeof server, &n));
  CHECK(n > 0 && n < sizeof server && strlen(server) == n);
  CHECK(strncmp(server, "Redis ", 6) == 0 || strncmp(server, "Valkey ", 7) == 0);
  CHECK_OK(redmutex_client_server(client, 0, NULL, 0, &n));
  CHECK_RESULT(redmutex_client_server(client, 1, server, sizeof server, &n),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_RESULT(redmutex_client_server(client, 0, NULL, 4, &n), REDMUTEX_RESULT_NULL_PARAMETER);
  CHECK_RESULT(redmutex_client_server(NULL, 0, server, sizeof server, &n),
               REDMUTEX_RESULT_NULL_PARAMETER);
  redmutex_client_free(client);
}

static void test_lock_and_unlock(void) {
  char name[128];
  redmutex_client *client = test_client();
  redmutex_guard *guard = NULL;
  bool locked = true;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "basic");

  CHECK_OK(redmutex_is_locked(client, name, &locked));
  CHECK(!locked);
  CHECK_OK(redmutex_lock(client, name, 30000, -1, &guard));
  CHECK(guard != NULL);
  CHECK(redmutex_guard_is_held(guard));
  CHECK_OK(redmutex_guard_check(guard));
  CHECK(redmutex_guard_fence(guard) >= 1);
  CHECK(redmutex_guard_valid_ms(guard) > 25000);
  CHECK(redmutex_guard_valid_ms(guard) <= 30000);
  CHECK_OK(redmutex_is_locked(client, name, &locked));
  CHECK(locked);

  CHECK_OK(redmutex_unlock(guard));
  CHECK_OK(redmutex_is_locked(client, name, &locked));
  CHECK(!locked);
  redmutex_client_free(client);
}

/* What `redmutex status` shows: the holder's value (the guard's token), its lease and the
 * last fence; a free lock has no holder and no lease, and keeps its last fence. */
static void test_status_names_the_holder_its_lease_and_the_fence(void) {
  char name[128];
  char holder[256];
  char token[256];
  char small[8];
  size_t n = 0;
  size_t token_n = 0;
  int64_t ttl = 0;
  uint64_t fence = 0;
  uint64_t granted = 0;
  redmutex_client *client = test_client();
  redmutex_guard *guard = NULL;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "status");

  CHECK_OK(redmutex_status(client, name, holder, sizeof holder, &n, &ttl, &fence));
  CHECK(n == 0 && holder[0] == '\0');
  CHECK(ttl == -1);
  CHECK(fence == 0);

  CHECK_OK(redmutex_lock(client, name, 30000, 0, &guard));
  CHECK_OK(redmutex_guard_token(guard, token, sizeof token, &token_n));
  CHECK_OK(redmutex_status(client, name, holder, sizeof holder, &n, &ttl, &fence));
  CHECK(n == token_n);
  CHECK(strcmp(holder, token) == 0);
  CHECK(ttl > 25000 && ttl <= 30000);
  granted = redmutex_guard_fence(guard);
  CHECK(granted >= 1 && fence == granted);
  /* A short buffer gets a prefix; the full length still says how much room it needs. */
  CHECK_OK(redmutex_status(client, name, small, sizeof small, &n, &ttl, &fence));
  CHECK(n == token_n && strlen(small) == sizeof small - 1);
  CHECK(strncmp(small, token, sizeof small - 1) == 0);
  CHECK_OK(redmutex_status_bytes(client, (const uint8_t *)name, strlen(name), NULL, 0, &n, &ttl,
                                 &fence));
  CHECK(n == token_n);
  CHECK_OK(redmutex_unlock(guard));

  CHECK_OK(redmutex_status(client, name, holder, sizeof holder, &n, &ttl, &fence));
  CHECK(n == 0 && ttl == -1);
  CHECK(fence == granted);
  redmutex_client_free(client);
}

static void test_second_owner_would_block(void) {
  char name[128];
  redmutex_client *a = test_client();
  redmutex_client *b = test_client();
  redmutex_guard *held = NULL;
  redmutex_guard *other = (redmutex_guard *)&other; /* a sentinel: must stay untouched */
  double started;
  CHECK(a != NULL && b != NULL);
  unique_name(name, sizeof name, "would-block");

  CHECK_OK(redmutex_lock(a, name, 30000, 0, &held));
  CHECK_RESULT(redmutex_lock(b, name, 30000, 0, &other), REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK(other == (redmutex_guard *)&other);
  CHECK(last_error_contains("would block"));
  /* The same client (another caller in this process) is refused as well. */
  CHECK_RESULT(redmutex_lock(a, name, 30000, 0, &other), REDMUTEX_RESULT_WOULD_BLOCK);

  started = now_ms();
  CHECK_RESULT(redmutex_lock(b, name, 30000, 300, &other), REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK(now_ms() - started >= 290);
  CHECK(other == (redmutex_guard *)&other);
  CHECK(redmutex_guard_is_held(held));

  CHECK_OK(redmutex_unlock(held));
  /* b waited before, so for a moment the lock is reserved for waiters (the hand-off
   * window): take it with a wait, as a waiter would. */
  other = NULL;
  CHECK_OK(redmutex_lock(b, name, 30000, 1000, &other));
  CHECK_OK(redmutex_unlock(other));
  redmutex_client_free(a);
  redmutex_client_free(b);
}

struct holder_args {
  redmutex_guard *guard;
  long hold_ms;
  redmutex_result unlocked;
};

static void *hold_then_unlock(void *p) {
  struct holder_args *args = p;
  sleep_ms(args->hold_ms);
  args->unlocked = redmutex_unlock(args->guard);
  return NULL;
}

static void test_waiter_gets_the_lock_when_it_is_released(void) {
  char name[128];
  redmutex_client *client = test_client();
  redmutex_guard *waiter = NULL;
  struct holder_args args = {NULL, 400, REDMUTEX_RESULT_PANIC};
  pthread_t holder;
  double started, waited;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "waiter");

  CHECK_OK(redmutex_lock(client, name, 30000, 0, &args.guard));
  CHECK(pthread_create(&holder, NULL, hold_then_unlock, &args) == 0);
  started = now_ms();
  /* Forever, from a second thread of the same process: woken by the release. */
  CHECK_OK(redmutex_lock(client, name, 30000, -1, &waiter));
  waited = now_ms() - started;
  CHECK(pthread_join(holder, NULL) == 0);
  CHECK(args.unlocked == REDMUTEX_RESULT_OK);
  CHECK(waited >= 350);
  CHECK(redmutex_guard_is_held(waiter));
  CHECK_OK(redmutex_unlock(waiter));
  redmutex_client_free(client);
}

static void test_fence_grows_with_every_grant(void) {
  char name[128];
  redmutex_client *client = test_client();
  redmutex_guard *guard = NULL;
  uint64_t first, second;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "fence");

  CHECK_OK(redmutex_lock(client, name, 30000, 0, &guard));
  first = redmutex_guard_fence(guard);
  CHECK_OK(redmutex_unlock(guard));
  CHECK_OK(redmutex_lock(client, name, 30000, 0, &guard));
  second = redmutex_guard_fence(guard);
  CHECK_OK(redmutex_unlock(guard));
  CHECK(first >= 1);
  CHECK(second > first);
  redmutex_client_free(client);
}

static void test_binary_names_are_kept_byte_for_byte(void) {
  char text[128];
  uint8_t name[160];
  size_t text_len, name_len;
  redmutex_client *client = test_client();
  redmutex_guard *binary = NULL;
  redmutex_guard *prefix = NULL;
  bool locked = false;
  CHECK(client != NULL);
  unique_name(text, sizeof text, "binary");
  text_len = strlen(text);
  memcpy(name, text, text_len);
  /* A NUL byte and bytes that are not UTF-8. */
  name[text_len] = 0x00;
  name[text_len + 1] = 0xff;
  name[text_len + 2] = 0xc3;
  name_len = text_len + 3;

  CHECK_OK(redmutex_lock_bytes(client, name, name_len, 30000, 0, &binary));
  CHECK_OK(redmutex_is_locked_bytes(client, name, name_len, &locked));
  CHECK(locked);
  /* The part before the NUL is another name, and it is free. */
  CHECK_OK(redmutex_is_locked(client, text, &locked));
  CHECK(!locked);
  CHECK_OK(redmutex_lock(client, text, 30000, 0, &prefix));
  CHECK_OK(redmutex_unlock(prefix));
  CHECK_OK(redmutex_unlock(binary));
  CHECK_OK(redmutex_is_locked_bytes(client, name, name_len, &locked));
  CHECK(!locked);
  redmutex_client_free(client);
}

static void test_guard_free_releases_the_lock(void) {
  char name[128];
  redmutex_client *client = test_client();
  redmutex_guard *guard = NULL;
  bool locked = true;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "guard-free");

  CHECK_OK(redmutex_lock(client, name, 30000, 0, &guard));
  redmutex_guard_free(guard);
  CHECK_OK(redmutex_is_locked(client, name, &locked));
  CHECK(!locked);
  CHECK_OK(redmutex_lock(client, name, 30000, 0, &guard));
  CHECK_OK(redmutex_unlock(guard));
  redmutex_client_free(client);
}

static void test_guard_outlives_its_client(void) {
  char name[128];
  redmutex_client *client = test_client();
  redmutex_client *other = test_client();
  redmutex_guard *guard = NULL;
  redmutex_guard *second = NULL;
  CHECK(client != NULL && other != NULL);
  unique_name(name, sizeof name, "outlives");

  CHECK_OK(redmutex_lock(client, name, 30000, 0, &guard));
  redmutex_client_free(client);
  CHECK(redmutex_guard_is_held(guard));
  CHECK_OK(redmutex_guard_extend(guard, 20000));
  CHECK_RESULT(redmutex_lock(other, name, 30000, 0, &second), REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK_OK(redmutex_unlock(guard));
  CHECK_OK(redmutex_lock(other, name, 30000, 0, &second));
  CHECK_OK(redmutex_unlock(second));
  redmutex_client_free(other);
}

static void test_extend_sets_a_new_lease(void) {
  char name[128];
  redmutex_client *client = test_client();
  redmutex_lock_options *options = NULL;
  redmutex_guard *guard = NULL;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "extend");

  CHECK_OK(redmutex_lock_options_new(&options));
  CHECK_OK(redmutex_lock_options_set_ttl(options, 2000));
  CHECK_OK(redmutex_lock_options_set_auto_renew(options, false));
  CHECK_OK(redmutex_lock_with_options(client, (const uint8_t *)name, strlen(name), options, 0,
                                      &guard));
  redmutex_lock_options_free(options);
  CHECK(redmutex_guard_valid_ms(guard) <= 2000);
  CHECK(redmutex_guard_renewals(guard) == 0);

  CHECK_OK(redmutex_guard_extend(guard, 60000));
  CHECK(redmutex_guard_valid_ms(guard) > 50000);
  CHECK(redmutex_guard_renewals(guard) == 1);
  CHECK_RESULT(redmutex_guard_extend(guard, 0), REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK(redmutex_guard_is_held(guard));
  CHECK_OK(redmutex_unlock(guard));
  redmutex_client_free(client);
}

static void test_auto_renew_keeps_the_lock_past_its_ttl(void) {
  char name[128];
  redmutex_client *client = test_client();
  redmutex_client *other = test_client();
  redmutex_guard *guard = NULL;
  redmutex_guard *second = NULL;
  bool locked = false;
  CHECK(client != NULL && other != NULL);
  unique_name(name, sizeof name, "auto-renew");

  /* A short lease has a short node timeout: warm the connection up first, and let the
   * attempt retry (a slow first connect, say under valgrind, must not fail the test). */
  CHECK_OK(redmutex_is_locked(client, name, &locked));
  CHECK_OK(redmutex_lock(client, name, 600, 5000, &guard));
  sleep_ms(2000);
  CHECK(redmutex_guard_is_held(guard));
  CHECK(redmutex_guard_renewals(guard) >= 2);
  CHECK_RESULT(redmutex_lock(other, name, 600, 0, &second), REDMUTEX_RESULT_WOULD_BLOCK);
  CHECK_OK(redmutex_unlock(guard));
  redmutex_client_free(client);
  redmutex_client_free(other);
}

static void test_fencing_off_gives_fence_zero(void) {
  char name[128];
  redmutex_client *client = test_client();
  redmutex_lock_options *options = NULL;
  redmutex_guard *guard = NULL;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "no-fence");

  CHECK_OK(redmutex_lock_options_new(&options));
  CHECK_OK(redmutex_lock_options_set_fencing(options, false));
  CHECK_OK(redmutex_lock_with_options(client, (const uint8_t *)name, strlen(name), options, 0,
                                      &guard));
  redmutex_lock_options_free(options);
  CHECK(redmutex_guard_fence(guard) == 0);
  CHECK(redmutex_guard_is_held(guard));
  CHECK_OK(redmutex_unlock(guard));
  redmutex_client_free(client);
}

static void test_max_hold_ends_the_lock_despite_renewal(void) {
  char name[128];
  redmutex_client *client = test_client();
  redmutex_lock_options *options = NULL;
  redmutex_guard *guard = NULL;
  bool lost = false;
  CHECK(client != NULL);
  unique_name(name, sizeof name, "max-hold");
  CHECK_OK(redmutex_is_locked(client, name, &lost));

  CHECK_OK(redmutex_lock_options_new(&options));
  CHECK_OK(redmutex_lock_options_set_ttl(options, 200));
  CHECK_OK(redmutex_lock_options_set_max_hold(options, 500));
  CHECK_OK(redmutex_lock_with_options(client, (const uint8_t *)name, strlen(name), options,
                                      5000, &guard));
  redmutex_lock_options_free(options);
  CHECK_OK(redmutex_guard_wait_lost(guard, 10000, &lost));
  CHECK(lost);
  CHECK(!redmutex_guard_is_held(guard));
  CHECK_RESULT(redmutex_unlock(guard), REDMUTEX_RESULT_LOST);
  redmutex_client_free(client);
}

static void test_owner_label_starts_the_token(void) {
  char name[128];
  char token[256];
  char small[8];
  size_t n = 0;
  redmutex_client_options *options = NULL;
  redmutex_client *client = NULL;
  redmutex_guard *guard = NULL;
  const char *urls[1];
  urls[0] = testing_env("REDMUTEX_TEST_URL");
  unique_name(name, sizeof name, "owner");

  CHECK_OK(redmutex_client_options_new(&options));
  CHECK_OK(redmutex_client_options_set_owner(options, "billing-worker-7"));
  CHECK_OK(redmutex_client_options_set_connect_timeout(options, 2000));
  CHECK_OK(redmutex_client_options_set_node_timeout(options, 500));
  CHECK_OK(redmutex_client_new_with_options(urls, 1, options, &client));
  redmutex_client_options_free(options);

  CHECK_OK(redmutex_lock(client, name, 30000, 0, &guard));
  CHECK_OK(redmutex_guard_token(guard, token, sizeof token, &n));
  /* The label, a colon, then 16 random bytes in hex. */
  CHECK(strncmp(token, "billing-worker-7:", 17) == 0);
  CHECK(n == 17 + 32);
  CHECK(strlen(token) == n);
  /* Cut short like snprintf: NUL-terminated, and the full length still reported. */
  CHECK_OK(redmutex_guard_token(guard, small, sizeof small, &n));
  CHECK(n == 17 + 32);
  CHECK(strcmp(small, "billing") == 0);
  CHECK_OK(redmutex_guard_token(guard, NULL, 0, &n));
  CHECK(n == 17 + 32);
  CHECK_OK(redmutex_unlock(guard));
  redmutex_client_free(client);
}

struct interrupt_state {
  int calls;
  int stop_after;
};

static bool interrupt_after(void *user_data) {
  struct interrupt_state *state = user_data;
  return ++state->calls >= state->stop_after;
}

static void test_interrupt_check_stops_a_blocking_wait(void) {
  char name[128];
  redmutex_client *client = test_client();
  redmutex_lock_options *options = NULL;
  redmutex_guard *held = NULL;
  redmutex_guard *waiter = NULL;
  struct interrupt_state state = {0, 3};
  CHECK(client != NULL);
  unique_name(name, sizeof name, "interrupt");

  CHECK_OK(redmutex_lock(client, name, 30000, 0, &held));
  CHECK_OK(redmutex_lock_options_new(&options));
  CHECK_OK(redmutex_lock_options_set_wait_cap(options, 50));
  CHECK_OK(redmutex_lock_options_set_interrupt(options, interrupt_after, &state));
  CHECK_RESULT(redmutex_lock_with_options(client, (const uint8_t *)name, strlen(name), options,
                                          -1, &waiter),
               REDMUTEX_RESULT_INTERRUPTED);
  redmutex_lock_options_free(options);
  CHECK(waiter == NULL);
  CHECK(state.calls == 3);
  CHECK(last_error_contains("interrupted"));
  CHECK_OK(redmutex_unlock(held));
  redmutex_client_free(client);
}

/* A wait with a 10 s wait cap ends as soon as its interrupt descriptor becomes readable (a
 * self-pipe a signal handler would write to), not at its cap: the interrupt check then runs
 * at once and stops the call. A descriptor without a check is refused. */
struct pipe_poke {
  int fd;
  volatile bool poked;
};

static void *poke_after_100ms(void *arg) {
  struct pipe_poke *poke = arg;
  struct timespec pause = {0, 100 * 1000 * 1000};
  nanosleep(&pause, NULL);
  poke->poked = true;
  if (write(poke->fd, "!", 1) != 1) {
    poke->poked = false;
  }
  return NULL;
}

static bool poked(void *user_data) { return ((struct pipe_poke *)user_data)->poked; }

static void test_interrupt_fd_ends_a_wait_before_its_cap(void) {
  char name[128];
  int fds[2];
  pthread_t poker;
  struct timespec before, after;
  redmutex_client *client = test_client();
  redmutex_lock_options *options = NULL;
  redmutex_guard *held = NULL;
  redmutex_guard *waiter = NULL;
  struct pipe_poke poke = {-1, false};
  CHECK(client != NULL);
  CHECK(pipe(fds) == 0);
  poke.fd = fds[1];
  unique_name(name, sizeof name, "interrupt-fd");

  CHECK_OK(redmutex_lock(client, name, 30000, 0, &held));
  CHECK_OK(redmutex_lock_options_new(&options));
  CHECK_OK(redmutex_lock_options_set_wait_cap(options, 10000));
  CHECK_RESULT(redmutex_lock_options_set_interrupt_fd(options, -2),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK_OK(redmutex_lock_options_set_interrupt_fd(options, fds[0]));
  /* No interrupt check yet: refused, nothing sent. */
  CHECK_RESULT(redmutex_lock_with_options(client, (const uint8_t *)name, strlen(name), options,
                                          -1, &waiter),
               REDMUTEX_RESULT_INVALID_ARGUMENT);
  CHECK(last_error_contains("interrupt check"));
  CHECK_OK(redmutex_lock_options_set_interrupt(options, poked, &poke));
  CHECK(pthread_create(&poker, NULL, poke_after_100ms, &poke) == 0);
  clock_gettime(CLOCK_MONOTONIC, &before);
  CHECK_RESULT(redmutex_lock_with_options(client, (const uint8_t *)name, strlen(name), options,
                                          -1, &waiter),
               REDMUTEX_RESULT_INTERRUPTED);
  clock_gettime(CLOCK_MONOTONIC, &after);
  pthread_join(poker, NULL);
  CHECK(poke.poked);
  CHECK(waiter == NULL);
  /* Well before the 10 s cap, when the interrupt check would first have run. */
  CHECK(after.tv_sec - before.tv_sec < 5);
  redmutex_lock_options_free(options);
  CHECK_OK(redmutex_unlock(held));
  close(fds[0]);
  close(fds[1]);
  redmutex_client_free(client);
}

static void test_auth_failure_is_reported_as_auth(void) {
  /* The test server has no password, so any AUTH is refused. */
  char url[256];
  char name[128];
  const char *plain = testing_env("REDMUTEX_TEST_URL");
  redmutex_client *client = NULL;
  redmutex_guard *guard = NULL;
  CHECK(strncmp(plain, "redis://", 8) == 0);
  snprintf(url, sizeof url, "redis://nobody:wrong-password@%s", plain + 8);
  unique_name(name, sizeof name, "auth");
  client = client_for(url);
  CHECK(client != NULL);
  CHECK_RESULT(redmutex_lock(client, name, 30000, -1, &guard), REDMUTEX_RESULT_AUTH);
  CHECK(guard == NULL);
  /* The message never shows the password. */
  CHECK(!last_error_contains("wrong-password"));
  redmutex_client_free(client);
}

static void test_unreachable_server_is_a_connection_error(void) {
  char name[128];
  redmutex_client_options *options = NULL;
  redmutex_client *client = NULL;
  redmutex_guard *guard = NULL;
  /* Port 1 on loopback: nobody listens, the connection is refused at once. */
  const char *urls[] = {"redis://127.0.0.1:1"};
  double started;
  unique_name(name, sizeof name, "unreachable");

  CHECK_OK(redmutex_client_options_new(&options));
  CHECK_OK(redmutex_client_options_set_connect_timeout(options, 300));
  CHECK_OK(redmutex_client_new_with_options(urls, 1, options, &client));
  redmutex_client_options_free(options);
  started = now_ms();
  /* Even "forever" gives up after the connect timeout when Redis is down. */
  CHECK_RESULT(redmutex_lock(client, name, 30000, -1, &guard), REDMUTEX_RESULT_CONNECTION);
  CHECK(now_ms() - started < 5000);
  CHECK(guard == NULL);
  CHECK(last_error_contains("127.0.0.1:1"));
  redmutex_client_free(client);
}

int main(void) {
  RUN(test_lock_and_unlock);
  RUN(test_client_server_says_what_each_node_runs);
  RUN(test_status_names_the_holder_its_lease_and_the_fence);
  RUN(test_second_owner_would_block);
  RUN(test_waiter_gets_the_lock_when_it_is_released);
  RUN(test_fence_grows_with_every_grant);
  RUN(test_binary_names_are_kept_byte_for_byte);
  RUN(test_guard_free_releases_the_lock);
  RUN(test_guard_outlives_its_client);
  RUN(test_extend_sets_a_new_lease);
  RUN(test_auto_renew_keeps_the_lock_past_its_ttl);
  RUN(test_fencing_off_gives_fence_zero);
  RUN(test_max_hold_ends_the_lock_despite_renewal);
  RUN(test_owner_label_starts_the_token);
  RUN(test_interrupt_check_stops_a_blocking_wait);
  RUN(test_interrupt_fd_ends_a_wait_before_its_cap);
  RUN(test_auth_failure_is_reported_as_auth);
  RUN(test_unreachable_server_is_a_connection_error);
  return TESTING_SUMMARY();
}
