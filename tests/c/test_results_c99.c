/* The header as a strict C99 (and, compiled by scripts/test-c.sh as C++11, a C++) user sees
 * it: REDMUTEX_RESULTS makes the enum and agrees with redmutex_result_name() on every value.
 * No Redis needed. */
#include <string.h>

#include "redmutex.h"
#include "testing.h"

struct row {
  const char *name;
  unsigned value;
  redmutex_result constant;
};

#define ROW(name, value) {"REDMUTEX_RESULT_" #name, value, REDMUTEX_RESULT_##name},
static const struct row rows[] = {REDMUTEX_RESULTS(ROW)};
#undef ROW

static void test_every_listed_result_has_its_name(void) {
  size_t i;
  CHECK(sizeof rows / sizeof rows[0] == 14);
  for (i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    CHECK((unsigned)rows[i].constant == rows[i].value);
    CHECK(strcmp(redmutex_result_name(rows[i].value), rows[i].name) == 0);
  }
}

static void test_stable_values(void) {
  CHECK(REDMUTEX_RESULT_OK == 0);
  CHECK(REDMUTEX_RESULT_INTERRUPTED == 9);
  CHECK(REDMUTEX_RESULT_NULL_PARAMETER == 100);
  CHECK(REDMUTEX_RESULT_OTHER == 103);
  CHECK(strcmp(redmutex_result_name(104), "REDMUTEX_RESULT_UNKNOWN") == 0);
  CHECK(strcmp(redmutex_result_name(10), "REDMUTEX_RESULT_UNKNOWN") == 0);
}

int main(void) {
  RUN(test_every_listed_result_has_its_name);
  RUN(test_stable_values);
  return TESTING_SUMMARY();
}
