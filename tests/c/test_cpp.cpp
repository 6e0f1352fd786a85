// Compiles include/redmutex.hpp as a C++17 user would, and checks it agrees with the C API.
#include <cstring>
#include <string_view>

#include "redmutex.hpp"
#include "testing.h"

static void test_version_matches_c_api() {
  std::string_view version = redmutex::version();
  CHECK(version == std::string_view(redmutex_version()));
  CHECK(version == EXPECTED_VERSION);
}

int main() {
  RUN(test_version_matches_c_api);
  return TESTING_SUMMARY();
}
