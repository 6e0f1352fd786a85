#include <stdio.h>
#include <string.h>

#include "redmutex.h"
#include "testing.h"

#ifndef EXPECTED_VERSION
#error "compile with -DEXPECTED_VERSION=\"x.y.z\" from Cargo.toml (scripts/test-c.sh does)"
#endif

static void test_version_matches_cargo_toml(void) {
  CHECK(redmutex_version() != NULL);
  CHECK(strcmp(redmutex_version(), EXPECTED_VERSION) == 0);
}

static void test_version_matches_header_macros(void) {
  char numbers[64];
  size_t len;
  const char *version = redmutex_version();
  snprintf(numbers, sizeof numbers, "%d.%d.%d", REDMUTEX_VERSION_MAJOR,
           REDMUTEX_VERSION_MINOR, REDMUTEX_VERSION_PATCH);
  len = strlen(numbers);
  /* A pre-release or build suffix ("-rc.1", "+meta") may follow the numbers. */
  CHECK(strncmp(version, numbers, len) == 0);
  CHECK(version[len] == '\0' || version[len] == '-' || version[len] == '+');
}

static void test_version_is_static(void) {
  CHECK(redmutex_version() == redmutex_version());
}

static void test_redis_urls_are_provided(void) {
  const char *urls5 = testing_env("REDMUTEX_TEST_URLS5");
  int commas = 0;
  CHECK(strncmp(testing_env("REDMUTEX_TEST_URL"), "redis://", 8) == 0);
  for (; *urls5 != '\0'; urls5++) commas += *urls5 == ',';
  CHECK(commas == 4);
}

int main(void) {
  RUN(test_version_matches_cargo_toml);
  RUN(test_version_matches_header_macros);
  RUN(test_version_is_static);
  RUN(test_redis_urls_are_provided);
  return TESTING_SUMMARY();
}
