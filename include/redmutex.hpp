/*
 * redmutex.hpp: a header-only C++17 wrapper over the C API in redmutex.h.
 *
 *   redmutex::Client client("redis://127.0.0.1:6379");
 *   if (auto guard = client.try_lock("invoice:nightly:lock", std::chrono::seconds(30))) {
 *     send_invoices(guard->fence());   // released when `guard` goes out of scope
 *   } else {
 *     // someone else sends them
 *   }
 *
 * Failures throw redmutex::Error, which carries the C result code and the library's
 * message. A Client is shared by many threads; a Guard belongs to one owner at a time and is
 * move-only; it holds a lock, a semaphore's permit or a read-write lock's read or write hold.
 * Link with -lredmutex (see `pkg-config --libs redmutex`).
 */
#ifndef REDMUTEX_HPP
#define REDMUTEX_HPP

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "redmutex.h"

namespace redmutex {

/** Version of the linked library, such as "0.1.0". Thread-safe; the view never dangles. */
inline std::string_view version() noexcept { return redmutex_version(); }

/** A failed call: the C result code (`REDMUTEX_RESULT_*`) and the library's detailed message. */
class Error : public std::runtime_error {
 public:
  Error(redmutex_result code, const std::string& message)
      : std::runtime_error(message), code_(code) {}

  /** The C result code, such as REDMUTEX_RESULT_NO_QUORUM. */
  redmutex_result code() const noexcept { return code_; }

  /** The code's name, such as "REDMUTEX_RESULT_NO_QUORUM". */
  const char* code_name() const noexcept { return redmutex_result_name(code_); }

 private:
  redmutex_result code_;
};

namespace detail {

/** The calling thread's last failure message (see redmutex_last_error_message). */
inline std::string last_error_message() {
  std::size_t n = 0;
  if (redmutex_last_error_message(nullptr, 0, &n) != REDMUTEX_RESULT_OK) return {};
  std::string message(n + 1, '\0');
  if (redmutex_last_error_message(message.data(), message.size(), &n) != REDMUTEX_RESULT_OK) {
    return {};
  }
  message.resize(n < message.size() ? n : message.size() - 1);
  return message;
}

[[noreturn]] inline void throw_error(redmutex_result code) {
  throw Error(code, last_error_message());
}

inline void check(redmutex_result code) {
  if (code != REDMUTEX_RESULT_OK) throw_error(code);
}

inline std::uint64_t to_ms(std::chrono::milliseconds d) {
  return d.count() < 0 ? 0 : static_cast<std::uint64_t>(d.count());
}

struct ClientOptionsDeleter {
  void operator()(redmutex_client_options* o) const noexcept { redmutex_client_options_free(o); }
};
struct LockOptionsDeleter {
  void operator()(redmutex_lock_options* o) const noexcept { redmutex_lock_options_free(o); }
};

}  // namespace detail

/** Settings of a Client; unset values keep the library's defaults. */
struct ClientOptions {
  /** Bound on opening one connection, and on retrying while Redis is unreachable (1 s). */
  std::optional<std::chrono::milliseconds> connect_timeout;
  /** Per-node, per-request timeout of every lock (default: derived from each lock's TTL). */
  std::optional<std::chrono::milliseconds> node_timeout;
  /** Label at the start of every lock value (default "hostname:pid"). */
  std::optional<std::string> owner;
  /** PEM of the CA that `rediss://` servers' certificates must chain to (default: the
   * system's roots). */
  std::optional<std::string> tls_ca_cert;
};

/** WAIT-based replication safety (see redmutex_lock_options_set_min_replicas). */
struct MinReplicas {
  /** Replicas of each node that must acknowledge each grant and renewal. */
  std::uint32_t n = 0;
  /** How long to wait for them (1 ms to half the TTL). */
  std::chrono::milliseconds timeout{0};
};

/** Settings of one lock. */
struct LockOptions {
  /** The lease: how long the lock survives its holder's silence. */
  std::chrono::milliseconds ttl{30000};
  /** Whether the client's renew thread extends the lease while the guard lives. */
  bool auto_renew = true;
  /** Renewal stops this long after the lock was taken (default: never). */
  std::optional<std::chrono::milliseconds> max_hold;
  /** Whether grants carry fence numbers. */
  bool fencing = true;
  /** Per-node, per-request timeout (default: the client's, else derived from the TTL). */
  std::optional<std::chrono::milliseconds> node_timeout;
  /** Each grant and renewal counts on a node only once this many replicas have it. */
  std::optional<MinReplicas> min_replicas;
  /** Base of the randomized retry delay (default 50 ms). */
  std::optional<std::chrono::milliseconds> retry_delay;
  /** The longest a waiter blocks before it tries again (default 2 s; a call's first wait
   * is at most 250 ms, and waits that run out double up to this cap). With `interrupt` and no
   * `interrupt_fd`, every wait stays at most 250 ms (or this cap, if lower), so that
   * `interrupt` is asked that often. */
  std::optional<std::chrono::milliseconds> wait_cap;
  /** How long newcomers leave a released lock to a waiter (default 20 ms; zero: off). */
  std::optional<std::chrono::milliseconds> handoff_window;
  /**
   * Asked on the waiting thread after every wake-up of a blocking lock call; returning true
   * stops the wait, which then throws Error with REDMUTEX_RESULT_INTERRUPTED. An exception
   * it throws also stops the wait, and is rethrown by the lock call.
   */
  std::function<bool()> interrupt;
  /**
   * A descriptor whose readability ends a wait for a release at once (the read end of a
   * self-pipe your signal handler writes to): `interrupt` then runs at once. Needs
   * `interrupt`; keep it readable only while `interrupt` says to stop, and open while
   * locking (see redmutex_lock_options_set_interrupt_fd).
   */
  std::optional<int> interrupt_fd;
  /**
   * Makes `interrupt_fd` end every wait of the call, not only a wait for a release: each read
   * of a reply and each connect, so a call ends at once even while a server does not answer.
   * `interrupt` then runs whenever the descriptor is readable, and must drain it when it says
   * to go on (see redmutex_lock_options_set_interrupt_every_wait).
   */
  bool interrupt_every_wait = false;
};

/**
 * A held lock. Move-only; releases the lock (best effort) when destroyed, unless it was
 * released with unlock() or moved from; the destructor can block up to the client's connect
 * timeout while it asks unreachable nodes again (never past the lock's validity). A moved-from or unlocked Guard is empty (`!guard`).
 * The const member functions may be called from several threads at once, release() too:
 * a watchdog thread waits in wait_lost() and the owner ends that wait with release(). The
 * destructor, unlock() and assignment must not overlap any other call.
 */
class Guard {
 public:
  Guard() noexcept = default;
  /** Adopts a handle from the C API (from redmutex_lock*): this Guard now ends it. */
  explicit Guard(redmutex_guard* guard) noexcept : guard_(guard) {}
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;
  Guard(Guard&& other) noexcept
      : guard_(std::exchange(other.guard_, nullptr)), callbacks_(std::move(other.callbacks_)) {}
  Guard& operator=(Guard&& other) noexcept {
    if (this != &other) {
      reset();
      guard_ = std::exchange(other.guard_, nullptr);
      callbacks_ = std::move(other.callbacks_);
    }
    return *this;
  }
  ~Guard() { reset(); }

  /** Whether this Guard owns a lock handle (it may still have been lost: see is_held). */
  explicit operator bool() const noexcept { return guard_ != nullptr; }

  /** The fence number of this grant (0 with fencing off or when empty). */
  std::uint64_t fence() const noexcept { return redmutex_guard_fence(guard_); }

  /** Whether the lock is still held, answered locally (false when empty). */
  bool is_held() const noexcept { return redmutex_guard_is_held(guard_); }

  /** Time left until the validity deadline (zero once not held). */
  std::chrono::milliseconds valid_for() const noexcept {
    return std::chrono::milliseconds(
        static_cast<std::chrono::milliseconds::rep>(redmutex_guard_valid_ms(guard_)));
  }

  /** Throws Error (REDMUTEX_RESULT_LOST, its what() says why) once the lock is no longer held. */
  void check() const { detail::check(redmutex_guard_check(guard_)); }

  /** Extends the lease to `ttl` from now on a majority of nodes; a shorter `ttl` than the lease
   * has left never shortens the key's expiry on the servers (see redmutex_guard_extend). */
  void extend(std::chrono::milliseconds ttl) const {
    detail::check(redmutex_guard_extend(guard_, detail::to_ms(ttl)));
  }

  /** Blocks until the lock is lost (true) or `timeout` passes (false). */
  bool wait_lost(std::chrono::milliseconds timeout) const {
    bool lost = false;
    detail::check(redmutex_guard_wait_lost(guard_, detail::to_ms(timeout), &lost));
    return lost;
  }

  /**
   * Calls `callback` once when the lock is lost, usually on the client's renew thread (see
   * redmutex_lost_callback). Exceptions it throws are swallowed. It never runs once the
   * Guard was released or destroyed.
   */
  void on_lost(std::function<void()> callback) {
    auto stored = std::make_unique<std::function<void()>>(std::move(callback));
    // Room first: once registered, keeping `stored` alive must not be able to throw.
    callbacks_.reserve(callbacks_.size() + 1);
    detail::check(redmutex_guard_on_lost(guard_, &Guard::call_lost, stored.get()));
    callbacks_.push_back(std::move(stored));
  }

  /**
   * Releases the lock and keeps the handle: every wait_lost() returns false at once, now and
   * later, and no on_lost callback runs any more. Safe while other threads are in the const
   * member functions; join them before destroying the Guard. Throws Error as unlock() does,
   * and REDMUTEX_RESULT_NOT_HELD when already released.
   */
  void release() const { detail::check(redmutex_guard_release(guard_)); }

  /** The value of the lock key ("owner-label:random-hex"). */
  std::string token() const {
    std::size_t n = 0;
    detail::check(redmutex_guard_token(guard_, nullptr, 0, &n));
    std::string token(n + 1, '\0');
    detail::check(redmutex_guard_token(guard_, token.data(), token.size(), &n));
    token.resize(n);
    return token;
  }

  /**
   * Releases the lock and reports the outcome; the Guard is empty afterwards either way.
   * Throws Error: REDMUTEX_RESULT_LOST when the lock had expired or been taken over,
   * REDMUTEX_RESULT_NO_QUORUM (or a connection error) when too few nodes confirmed.
   */
  void unlock() {
    redmutex_result r = redmutex_unlock(std::exchange(guard_, nullptr));
    callbacks_.clear();
    detail::check(r);
  }

  /** The C handle, still owned by this Guard. */
  redmutex_guard* native_handle() const noexcept { return guard_; }

 private:
  static void call_lost(void* user_data) noexcept {
    try {
      (*static_cast<std::function<void()>*>(user_data))();
    } catch (...) {
      // Nothing may unwind into the library.
    }
  }

  void reset() noexcept {
    // Frees the handle first: once redmutex_guard_free returns, no callback runs any more,
    // so the stored functions can go.
    redmutex_guard_free(std::exchange(guard_, nullptr));
    callbacks_.clear();
  }

  redmutex_guard* guard_ = nullptr;
  std::vector<std::unique_ptr<std::function<void()>>> callbacks_;
};

/** What `redmutex status` shows about a lock, from Client::status (for monitoring only). */
struct Status {
  /** The holder's value (`owner-label:random-hex` for redmutex holders); empty when free. */
  std::string holder;
  /** The holder's remaining lease; nullopt when the lock is free or never expires. */
  std::optional<std::chrono::milliseconds> ttl;
  /** The last fence number granted for the name (0 when none was). */
  std::uint64_t fence = 0;
};

/** One hold of a lock that Client::list found, as the nodes that have it see it. */
struct ListedHold {
  /** What it holds: REDMUTEX_HOLD_KIND_EXCLUSIVE (a lock, or a read-write lock's writer),
   * REDMUTEX_HOLD_KIND_READ or REDMUTEX_HOLD_KIND_PERMIT (of a semaphore). */
  redmutex_hold_kind kind = REDMUTEX_HOLD_KIND_EXCLUSIVE;
  /** The holder's token (`owner-label:random-hex` for redmutex holders). */
  std::string holder;
  /** Its remaining lease, the shortest among the nodes that have it; nullopt for a key
   * without expiry (not one redmutex set). */
  std::optional<std::chrono::milliseconds> ttl;
  /** On how many nodes it is. */
  std::size_t nodes = 0;

  /** "exclusive", "read" or "permit", as `redmutex list` prints it. */
  const char* kind_name() const noexcept { return redmutex_hold_kind_name(kind); }
};

/** One lock that Client::list found: held, or waited for (for monitoring only). */
struct ListedLock {
  /** The lock's name (any bytes). */
  std::string name;
  /** Its holds, by kind, then holder; empty for a lock listed only for its waiters. */
  std::vector<ListedHold> holds;
  /** The last fence number granted for the name (the largest among the nodes). */
  std::uint64_t fence = 0;
  /** How many callers have announced that they wait for it (the most any node counts). */
  std::uint64_t waiters = 0;
  /** How many nodes answered. */
  std::size_t nodes = 0;
  /** Whether the nodes that answered disagree: some hold is not on every one of them. */
  bool disagree = false;
};

/**
 * A connection to one Redis server or to several independent masters (Redlock).
 * Move-only; shared by many threads (all member functions are const and thread-safe).
 * Guards taken through it stay valid after it is destroyed.
 */
class Client {
 public:
  using Ms = std::chrono::milliseconds;

  /** A client for one Redis URL, such as "redis://127.0.0.1:6379". */
  explicit Client(std::string_view url, const ClientOptions& options = {})
      : Client(std::vector<std::string>{std::string(url)}, options) {}

  /** A client for several independent masters: a lock needs a majority (Redlock). */
  explicit Client(const std::vector<std::string>& urls, const ClientOptions& options = {}) {
    std::vector<const char*> pointers;
    for (const std::string& url : urls) {
      if (url.find('\0') != std::string::npos) {
        throw Error(REDMUTEX_RESULT_INVALID_ARGUMENT, "invalid argument: a URL holds a NUL byte");
      }
      pointers.push_back(url.c_str());
    }
    static const char* const none = nullptr;
    const char* const* array = pointers.empty() ? &none : pointers.data();

    redmutex_client_options* raw = nullptr;
    detail::check(redmutex_client_options_new(&raw));
    std::unique_ptr<redmutex_client_options, detail::ClientOptionsDeleter> opts(raw);
    if (options.connect_timeout) {
      detail::check(redmutex_client_options_set_connect_timeout(
          opts.get(), detail::to_ms(*options.connect_timeout)));
    }
    if (options.node_timeout) {
      detail::check(redmutex_client_options_set_node_timeout(
          opts.get(), detail::to_ms(*options.node_timeout)));
    }
    if (options.owner) {
      detail::check(redmutex_client_options_set_owner(opts.get(), options.owner->c_str()));
    }
    if (options.tls_ca_cert) {
      detail::check(redmutex_client_options_set_tls_ca_cert(
          opts.get(), bytes(*options.tls_ca_cert), options.tls_ca_cert->size()));
    }
    detail::check(redmutex_client_new_with_options(array, pointers.size(), opts.get(), &client_));
  }

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  Client(Client&& other) noexcept : client_(std::exchange(other.client_, nullptr)) {}
  Client& operator=(Client&& other) noexcept {
    if (this != &other) {
      redmutex_client_free(client_);
      client_ = std::exchange(other.client_, nullptr);
    }
    return *this;
  }
  ~Client() { redmutex_client_free(client_); }

  /** Waits as long as it takes for the lock (throws Error when Redis stays unreachable). */
  [[nodiscard]] Guard lock(std::string_view name,
                           std::chrono::milliseconds ttl = std::chrono::milliseconds(30000)) const {
    return lock(name, with_ttl(ttl));
  }
  [[nodiscard]] Guard lock(std::string_view name, const LockOptions& options) const {
    return blocking(Kind::Mutex, 0, name, options);
  }

  /** One attempt: the Guard, or nullopt when someone else holds the lock. */
  [[nodiscard]] std::optional<Guard> try_lock(
      std::string_view name, std::chrono::milliseconds ttl = std::chrono::milliseconds(30000))
      const {
    return acquire(Kind::Mutex, 0, name, with_ttl(ttl), 0);
  }
  [[nodiscard]] std::optional<Guard> try_lock(std::string_view name,
                                              const LockOptions& options) const {
    return acquire(Kind::Mutex, 0, name, options, 0);
  }

  /** Waits at most `wait`: the Guard, or nullopt when someone else held it all along. */
  [[nodiscard]] std::optional<Guard> try_lock_for(
      std::string_view name, std::chrono::milliseconds wait,
      std::chrono::milliseconds ttl = std::chrono::milliseconds(30000)) const {
    return acquire(Kind::Mutex, 0, name, with_ttl(ttl), wait_of(wait));
  }
  [[nodiscard]] std::optional<Guard> try_lock_for(std::string_view name,
                                                  std::chrono::milliseconds wait,
                                                  const LockOptions& options) const {
    return acquire(Kind::Mutex, 0, name, options, wait_of(wait));
  }

  /**
   * A permit of the semaphore `name`: at most `permits` holders at once (1 to 1024; every
   * user of a name gives the same count). As lock() / try_lock() / try_lock_for(): waits as
   * long as it takes, makes one attempt, or waits at most `wait` (nullopt when every permit
   * stayed held). The Guard is a permit, with its own fence.
   */
  [[nodiscard]] Guard semaphore(std::string_view name, std::uint32_t permits,
                                Ms ttl = Ms(30000)) const {
    return blocking(Kind::Semaphore, permits, name, with_ttl(ttl));
  }
  [[nodiscard]] Guard semaphore(std::string_view name, std::uint32_t permits,
                                const LockOptions& options) const {
    return blocking(Kind::Semaphore, permits, name, options);
  }
  [[nodiscard]] std::optional<Guard> try_semaphore(std::string_view name, std::uint32_t permits,
                                                   Ms ttl = Ms(30000)) const {
    return acquire(Kind::Semaphore, permits, name, with_ttl(ttl), 0);
  }
  [[nodiscard]] std::optional<Guard> try_semaphore(std::string_view name, std::uint32_t permits,
                                                   const LockOptions& options) const {
    return acquire(Kind::Semaphore, permits, name, options, 0);
  }
  [[nodiscard]] std::optional<Guard> try_semaphore_for(std::string_view name,
                                                       std::uint32_t permits, Ms wait,
                                                       Ms ttl = Ms(30000)) const {
    return acquire(Kind::Semaphore, permits, name, with_ttl(ttl), wait_of(wait));
  }
  [[nodiscard]] std::optional<Guard> try_semaphore_for(std::string_view name,
                                                       std::uint32_t permits, Ms wait,
                                                       const LockOptions& options) const {
    return acquire(Kind::Semaphore, permits, name, options, wait_of(wait));
  }

  /**
   * A read hold of the read-write lock `name`: many readers at once, never with a writer or
   * a lock() holder of the name; new readers queue behind a waiting writer. Its fence is that
   * of the last write it may observe. Waits, tries and times out as lock() and its kin.
   */
  [[nodiscard]] Guard read_lock(std::string_view name, Ms ttl = Ms(30000)) const {
    return blocking(Kind::Read, 0, name, with_ttl(ttl));
  }
  [[nodiscard]] Guard read_lock(std::string_view name, const LockOptions& options) const {
    return blocking(Kind::Read, 0, name, options);
  }
  [[nodiscard]] std::optional<Guard> try_read_lock(std::string_view name,
                                                   Ms ttl = Ms(30000)) const {
    return acquire(Kind::Read, 0, name, with_ttl(ttl), 0);
  }
  [[nodiscard]] std::optional<Guard> try_read_lock(std::string_view name,
                                                   const LockOptions& options) const {
    return acquire(Kind::Read, 0, name, options, 0);
  }
  [[nodiscard]] std::optional<Guard> try_read_lock_for(std::string_view name, Ms wait,
                                                       Ms ttl = Ms(30000)) const {
    return acquire(Kind::Read, 0, name, with_ttl(ttl), wait_of(wait));
  }
  [[nodiscard]] std::optional<Guard> try_read_lock_for(std::string_view name, Ms wait,
                                                       const LockOptions& options) const {
    return acquire(Kind::Read, 0, name, options, wait_of(wait));
  }

  /**
   * The write hold of the read-write lock `name`: exclusive of readers and writers. It is the
   * lock that lock(name) takes, so the two exclude each other.
   */
  [[nodiscard]] Guard write_lock(std::string_view name, Ms ttl = Ms(30000)) const {
    return blocking(Kind::Write, 0, name, with_ttl(ttl));
  }
  [[nodiscard]] Guard write_lock(std::string_view name, const LockOptions& options) const {
    return blocking(Kind::Write, 0, name, options);
  }
  [[nodiscard]] std::optional<Guard> try_write_lock(std::string_view name,
                                                    Ms ttl = Ms(30000)) const {
    return acquire(Kind::Write, 0, name, with_ttl(ttl), 0);
  }
  [[nodiscard]] std::optional<Guard> try_write_lock(std::string_view name,
                                                    const LockOptions& options) const {
    return acquire(Kind::Write, 0, name, options, 0);
  }
  [[nodiscard]] std::optional<Guard> try_write_lock_for(std::string_view name, Ms wait,
                                                        Ms ttl = Ms(30000)) const {
    return acquire(Kind::Write, 0, name, with_ttl(ttl), wait_of(wait));
  }
  [[nodiscard]] std::optional<Guard> try_write_lock_for(std::string_view name, Ms wait,
                                                        const LockOptions& options) const {
    return acquire(Kind::Write, 0, name, options, wait_of(wait));
  }

  /** Whether anyone holds the lock right now (for monitoring; may be stale at once). */
  bool is_locked(std::string_view name) const {
    bool locked = false;
    detail::check(redmutex_is_locked_bytes(client_, bytes(name), name.size(), &locked));
    return locked;
  }

  /** Who holds the lock, for how long, and its last fence (may be stale at once). */
  Status status(std::string_view name) const {
    Status status;
    std::string holder(64, '\0');
    for (;;) {
      std::size_t n = 0;
      std::int64_t ttl = -1;
      detail::check(redmutex_status_bytes(client_, bytes(name), name.size(), holder.data(),
                                          holder.size(), &n, &ttl, &status.fence));
      if (n < holder.size()) {
        holder.resize(n);
        status.holder = std::move(holder);
        if (ttl >= 0) status.ttl = std::chrono::milliseconds(ttl);
        return status;
      }
      holder.assign(n + 1, '\0');  // a longer holder than the buffer: ask again with room
    }
  }

  /**
   * Every lock whose name matches `pattern` (Redis's glob: `*`, `?`, `[a-z]`, `\x`) and that
   * is held or waited for now, sorted by name, read on every node: what `redmutex list`
   * shows (see redmutex_list). For monitoring: the answer may be stale at once. Throws Error
   * (REDMUTEX_RESULT_INVALID_ARGUMENT for an empty pattern or one over 2048 bytes,
   * REDMUTEX_RESULT_NO_QUORUM when too few nodes answered).
   */
  std::vector<ListedLock> list(std::string_view pattern = "*") const {
    Listing listing;
    redmutex_result r = redmutex_list_bytes(client_, bytes(pattern), pattern.size(),
                                            &Client::collect_listed, &listing);
    if (listing.error) std::rethrow_exception(listing.error);
    detail::check(r);
    return std::move(listing.locks);
  }

  /**
   * Removes every hold of the lock `name`, whoever has it, and returns how many were removed
   * (0 when nothing was held): what `redmutex unlock --force` does, for a lock whose holder is
   * gone for good. A holder that is still alive runs on until its next renewal or check()
   * (see redmutex_force_unlock). Throws Error as the other calls do.
   */
  std::size_t force_unlock(std::string_view name) const {
    std::size_t removed = 0;
    detail::check(redmutex_force_unlock_bytes(client_, bytes(name), name.size(), &removed));
    return removed;
  }

  /** What this client's locks did so far, and what they hold and wait for now (see
   * redmutex_stats). Local, no network. */
  redmutex_stats stats() const {
    redmutex_stats s{};
    s.size = sizeof s;
    detail::check(redmutex_client_stats(client_, &s));
    return s;
  }

  /** How many connections this client has open now to each node, in the order of the
   * client's URLs (see redmutex_client_connections); stats().connections_open is their sum.
   * Local, no network. */
  std::vector<std::uint64_t> connections() const {
    std::vector<std::uint64_t> out;
    std::size_t n = 0;
    detail::check(redmutex_client_connections(client_, nullptr, 0, &n));
    // The node count never changes for a client, so one call with room for all fills them.
    out.resize(n);
    if (n > 0) detail::check(redmutex_client_connections(client_, out.data(), n, &n));
    return out;
  }

  /** What each node said it runs at the client's first connection to it ("Redis 7.0.15",
   * "Valkey 8.1.8"), in the order of the client's URLs; empty for a node not connected to yet
   * or whose server would not say. Local, no network. */
  std::vector<std::string> servers() const {
    std::vector<std::string> out;
    for (std::size_t i = 0;; ++i) {
      std::size_t n = 0;
      redmutex_result r = redmutex_client_server(client_, i, nullptr, 0, &n);
      if (r == REDMUTEX_RESULT_INVALID_ARGUMENT) return out;
      detail::check(r);
      std::string server(n, '\0');
      if (n > 0) detail::check(redmutex_client_server(client_, i, server.data(), n + 1, &n));
      out.push_back(std::move(server));
    }
  }

  /** The C handle, still owned by this Client. */
  redmutex_client* native_handle() const noexcept { return client_; }

 private:
  /** What a lock call takes. */
  enum class Kind { Mutex, Semaphore, Read, Write };

  static std::int64_t wait_of(std::chrono::milliseconds wait) noexcept {
    return wait.count() < 0 ? 0 : static_cast<std::int64_t>(wait.count());
  }

  Guard blocking(Kind kind, std::uint32_t permits, std::string_view name,
                 const LockOptions& options) const {
    std::optional<Guard> guard = acquire(kind, permits, name, options, -1);
    if (!guard) detail::throw_error(REDMUTEX_RESULT_WOULD_BLOCK);
    return std::move(*guard);
  }

  static LockOptions with_ttl(std::chrono::milliseconds ttl) {
    LockOptions options;
    options.ttl = ttl;
    return options;
  }

  static const std::uint8_t* bytes(std::string_view s) noexcept {
    // A non-NULL pointer even for an empty name, so the library reports the empty name.
    return reinterpret_cast<const std::uint8_t*>(s.empty() ? "" : s.data());
  }

  std::optional<Guard> acquire(Kind kind, std::uint32_t permits, std::string_view name,
                               const LockOptions& options, std::int64_t wait_ms) const {
    redmutex_lock_options* raw = nullptr;
    detail::check(redmutex_lock_options_new(&raw));
    std::unique_ptr<redmutex_lock_options, detail::LockOptionsDeleter> opts(raw);
    detail::check(redmutex_lock_options_set_ttl(opts.get(), detail::to_ms(options.ttl)));
    detail::check(redmutex_lock_options_set_auto_renew(opts.get(), options.auto_renew));
    detail::check(redmutex_lock_options_set_fencing(opts.get(), options.fencing));
    if (options.max_hold) {
      // The C API spells "no limit" as 0; here that is std::nullopt, so 0 is out of range.
      if (options.max_hold->count() <= 0) {
        throw Error(REDMUTEX_RESULT_INVALID_ARGUMENT, "invalid argument: max_hold must be positive");
      }
      detail::check(
          redmutex_lock_options_set_max_hold(opts.get(), detail::to_ms(*options.max_hold)));
    }
    if (options.node_timeout) {
      // Likewise 0 means "the default" in C, which here is std::nullopt.
      if (options.node_timeout->count() <= 0) {
        throw Error(REDMUTEX_RESULT_INVALID_ARGUMENT,
                    "invalid argument: node_timeout must be positive");
      }
      detail::check(
          redmutex_lock_options_set_node_timeout(opts.get(), detail::to_ms(*options.node_timeout)));
    }
    if (options.min_replicas) {
      detail::check(redmutex_lock_options_set_min_replicas(
          opts.get(), options.min_replicas->n, detail::to_ms(options.min_replicas->timeout)));
    }
    if (options.retry_delay) {
      detail::check(
          redmutex_lock_options_set_retry_delay(opts.get(), detail::to_ms(*options.retry_delay)));
    }
    if (options.wait_cap) {
      detail::check(
          redmutex_lock_options_set_wait_cap(opts.get(), detail::to_ms(*options.wait_cap)));
    }
    if (options.handoff_window) {
      detail::check(redmutex_lock_options_set_handoff_window(
          opts.get(), detail::to_ms(*options.handoff_window)));
    }
    Interrupt interrupt{&options.interrupt, nullptr};
    if (options.interrupt) {
      detail::check(redmutex_lock_options_set_interrupt(opts.get(), &Client::call_interrupt,
                                                        &interrupt));
    }
    if (options.interrupt_fd) {
      detail::check(redmutex_lock_options_set_interrupt_fd(opts.get(), *options.interrupt_fd));
    }
    if (options.interrupt_every_wait) {
      detail::check(redmutex_lock_options_set_interrupt_every_wait(opts.get(), true));
    }
    redmutex_guard* guard = nullptr;
    const std::uint8_t* n = bytes(name);
    redmutex_lock_options* o = opts.get();
    redmutex_result r =
        kind == Kind::Semaphore
            ? redmutex_semaphore_acquire_with_options(client_, n, name.size(), permits, o,
                                                      wait_ms, &guard)
        : kind == Kind::Read  ? redmutex_read_lock_with_options(client_, n, name.size(), o,
                                                                wait_ms, &guard)
        : kind == Kind::Write ? redmutex_write_lock_with_options(client_, n, name.size(), o,
                                                                 wait_ms, &guard)
                              : redmutex_lock_with_options(client_, n, name.size(), o, wait_ms,
                                                           &guard);
    if (interrupt.error) {
      redmutex_guard_free(guard);  // NULL unless the lock was taken all the same
      std::rethrow_exception(interrupt.error);
    }
    if (r == REDMUTEX_RESULT_WOULD_BLOCK) return std::nullopt;
    detail::check(r);
    return Guard(guard);
  }

  /** What list() has copied so far, and an exception that stopped it. */
  struct Listing {
    std::vector<ListedLock> locks;
    std::exception_ptr error;
  };

  static int collect_listed(const redmutex_listed_lock* lock, void* user_data) noexcept {
    auto* listing = static_cast<Listing*>(user_data);
    try {
      ListedLock copy;
      copy.name.assign(reinterpret_cast<const char*>(lock->name), lock->name_len);
      for (std::size_t i = 0; i < lock->holds_len; ++i) {
        const redmutex_listed_hold& h = lock->holds[i];
        ListedHold hold;
        hold.kind = h.kind;
        hold.holder.assign(reinterpret_cast<const char*>(h.holder), h.holder_len);
        if (h.ttl_ms >= 0) hold.ttl = std::chrono::milliseconds(h.ttl_ms);
        hold.nodes = h.nodes;
        copy.holds.push_back(std::move(hold));
      }
      copy.fence = lock->fence;
      copy.waiters = lock->waiters;
      copy.nodes = lock->nodes;
      copy.disagree = lock->disagree;
      listing->locks.push_back(std::move(copy));
      return 0;
    } catch (...) {
      // Nothing may unwind into the library (std::bad_alloc): stop, and rethrow after.
      listing->error = std::current_exception();
      return 1;
    }
  }

  /** The interrupt check of one lock call, and an exception it threw. */
  struct Interrupt {
    const std::function<bool()>* check;
    std::exception_ptr error;
  };

  static bool call_interrupt(void* user_data) noexcept {
    auto* interrupt = static_cast<Interrupt*>(user_data);
    try {
      return (*interrupt->check)();
    } catch (...) {
      // Nothing may unwind into the library: stop the wait and rethrow after it.
      interrupt->error = std::current_exception();
      return true;
    }
  }

  redmutex_client* client_ = nullptr;
};

}  // namespace redmutex

#endif /* REDMUTEX_HPP */
