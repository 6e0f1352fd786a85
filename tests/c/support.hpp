// Helpers shared by the C++ tests of redmutex.hpp: the test server's clients and unique lock
// names. Include after redmutex.hpp and testing.h.
#ifndef REDMUTEX_TESTS_SUPPORT_HPP
#define REDMUTEX_TESTS_SUPPORT_HPP

#include <atomic>
#include <chrono>
#include <string>

#include <unistd.h>

#include "redmutex.hpp"
#include "testing.h"

static std::string url() { return testing_env("REDMUTEX_TEST_URL"); }

// A lock name no other test, run or process uses: the server outlives one test program.
static std::string unique_name(const char* what) {
  static std::atomic<unsigned> counter{0};
  return "redmutex-cpp-test:" + std::to_string(getpid()) + ":" + std::to_string(counter++) +
         ":" + what;
}

// Options for the test server's clients: see TEST_NODE_TIMEOUT_MS in testing.h.
static redmutex::ClientOptions test_options() {
  redmutex::ClientOptions options;
  options.node_timeout = std::chrono::milliseconds(TEST_NODE_TIMEOUT_MS);
  return options;
}

// A client for the one-server test Redis.
static redmutex::Client test_client() { return redmutex::Client(url(), test_options()); }

#endif  // REDMUTEX_TESTS_SUPPORT_HPP
