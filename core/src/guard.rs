//! [`Guard`]: the user's handle on a held lease of any kind — a mutex grant
//! ([`MutexGuard`]), a semaphore's permit, a read-write lock's read or write hold — one type
//! over the [`kind`], as lock_api has one guard over its raw lock. What a lease is worth and
//! how it is kept, extended, lost and released is the lease's business (`lock/lease.rs`,
//! `lock/release.rs`).

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::Error;
#[allow(unused_imports)] // for the docs
use crate::error::ErrorKind;
use crate::lock::{Lease, Released};

/// The kinds of lease a [`Guard`] can hold. Markers only: a guard's kind names it in the
/// docs and in messages, and keeps the types apart; every kind has the same methods.
pub mod kind {
    /// A kind of lease; sealed (the library's four are all there are).
    pub trait Kind: sealed::Sealed + Send + Sync + 'static {
        /// The guard's type name, as `Debug` shows it.
        #[doc(hidden)]
        const TYPE: &'static str;
        /// What the guard holds, in a sentence ("the permit").
        #[doc(hidden)]
        const WHAT: &'static str;
    }

    mod sealed {
        pub trait Sealed {}
    }

    macro_rules! kinds {
        ($($(#[$doc:meta])* $kind:ident: $type:literal, $what:literal;)*) => {$(
            $(#[$doc])*
            #[derive(Debug)]
            pub enum $kind {}
            impl sealed::Sealed for $kind {}
            impl Kind for $kind {
                const TYPE: &'static str = $type;
                const WHAT: &'static str = $what;
            }
        )*};
    }

    kinds! {
        /// A mutex grant ([`MutexGuard`](crate::MutexGuard)).
        Mutex: "MutexGuard", "the lock";
        /// One of a semaphore's permits ([`Permit`](crate::Permit)).
        Permit: "Permit", "the permit";
        /// A read-write lock's read hold ([`ReadGuard`](crate::ReadGuard)).
        Read: "ReadGuard", "the read hold";
        /// A read-write lock's write hold ([`WriteGuard`](crate::WriteGuard)).
        Write: "WriteGuard", "the write hold";
        /// Any of the above, for code that keeps guards of several kinds in one place (see
        /// [`Guard::into_any`](crate::Guard::into_any)); it goes on naming the kind it was.
        Any: "Guard", "the lease";
    }
}

use kind::Kind;

/// Proof that this process holds a lease of kind `K`, until it is released or lost. Users
/// write the kind's own name: [`MutexGuard`], [`Permit`](crate::Permit),
/// [`ReadGuard`](crate::ReadGuard), [`WriteGuard`](crate::WriteGuard).
///
/// The guard owns everything it needs (no borrowed lifetime), is `Send`, and releases the lease
/// when dropped (best effort, bounded by the client's connect timeout, never panics; use
/// [`unlock`](Guard::unlock) to learn the outcome). While it lives, the client's renew thread
/// keeps it (unless auto-renew is off).
///
/// A guard answers "do I still hold it?" locally, without the network: [`is_held`],
/// [`check`], [`valid_until`]. The validity deadline is counted on a clock that keeps running
/// while the machine is suspended (`CLOCK_BOOTTIME` on Linux), so a holder that wakes from a
/// suspend does not believe it still holds an expired lease, and it already accounts for
/// clock drift, as the Redlock text requires.
///
/// [`is_held`]: Guard::is_held
/// [`check`]: Guard::check
/// [`valid_until`]: Guard::valid_until
#[must_use = "if unused the guard releases what it holds at once"]
pub struct Guard<K: Kind> {
    held: Held,
    kind: PhantomData<K>,
}

/// What a guard holds, and what releases it when the guard is dropped; apart from the guard
/// so that a guard can change its kind's name ([`Guard::into_any`]) without a release.
struct Held {
    lease: Arc<Lease>,
    /// The guard's type name and what it holds, from the kind it was made as.
    names: (&'static str, &'static str),
}

/// A held mutex: the [`Guard`] of a [`Mutex`](crate::Mutex)'s grant. Its
/// [`fence`](Guard::fence) is strictly greater than that of every earlier holder of this name.
pub type MutexGuard = Guard<kind::Mutex>;

impl<K: Kind> Guard<K> {
    pub(crate) fn new(lease: Arc<Lease>) -> Guard<K> {
        Guard {
            held: Held {
                lease,
                names: (K::TYPE, K::WHAT),
            },
            kind: PhantomData,
        }
    }

    /// The same guard as a [`Guard<kind::Any>`](kind::Any), for code that keeps guards of
    /// several kinds in one place (a binding's handle); nothing is released or sent. Its
    /// `Debug` and log lines still name the kind it was made as.
    pub fn into_any(self) -> Guard<kind::Any> {
        Guard {
            held: self.held,
            kind: PhantomData,
        }
    }

    fn lease(&self) -> &Arc<Lease> {
        &self.held.lease
    }

    /// The fence number (0 when fencing is off). A mutex grant's and a write hold's is
    /// strictly greater than that of every earlier grant of this name; see each kind's type
    /// for what its fence promises. Pass it to the resource you protect, and have the
    /// resource reject writes that carry a lower number than one it has already seen.
    pub fn fence(&self) -> u64 {
        self.lease().fence
    }

    /// The token: the value of the lock key (`owner-label:random-hex`).
    pub fn token(&self) -> &[u8] {
        &self.lease().token
    }

    /// The lock's name (its Redis key).
    pub fn name(&self) -> &[u8] {
        &self.lease().spec.keys.lock
    }

    /// Whether we still hold the lock, answered locally: not released, not reported lost and
    /// before the validity deadline. Always false in a forked child.
    pub fn is_held(&self) -> bool {
        self.lease().is_held()
    }

    /// `Ok` while [`is_held`](Guard::is_held); no network.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Lost`] once the lock expired or was taken over; its message says why
    /// (another owner has it, it was gone when renewed, too many nodes are down, its validity
    /// or `max_hold` ran out) and [`Error::nodes`] what each node answered to the renewal that
    /// found out, if one did. [`ErrorKind::NotHeld`] after [`release`](Guard::release) or
    /// in a forked child, whose copy of the guard was never its own.
    pub fn check(&self) -> Result<(), Error> {
        self.lease().check()
    }

    /// The local validity deadline: until then, no other client can hold the lock (given the
    /// bounded clock drift the Redlock text assumes). Renewal moves it forward. An `Instant`
    /// stands still while the machine is suspended, so after a suspend this deadline is late;
    /// [`is_held`](Guard::is_held) and [`check`](Guard::check) count on a clock that
    /// does not stop, and are the ones to ask.
    pub fn valid_until(&self) -> Instant {
        self.lease().valid_until()
    }

    /// Calls `observer` with the new [`valid_until`](Guard::valid_until) right after
    /// every confirmed renewal (automatic or [`extend`](Guard::extend)), on the thread
    /// that renewed. For the project's test drivers, which record what the library promised
    /// when it promised it; not part of the stable API.
    #[doc(hidden)]
    pub fn on_renewed(&self, observer: impl Fn(Instant) + Send + Sync + 'static) {
        self.lease().on_renewed(Arc::new(observer));
    }

    /// How many renewals (automatic or [`extend`](Guard::extend)) succeeded so far.
    pub fn renewals(&self) -> u64 {
        self.lease().renewals()
    }

    /// Extends the lease to `ttl` from now on a quorum of nodes, checking our token; later
    /// automatic renewals use this `ttl` too. Never re-creates a lock that is gone.
    ///
    /// The servers only ever lengthen an expiry: with a `ttl` shorter than the lease has
    /// left, the key keeps its later expiry there (a request that arrives late must never cut
    /// a longer lease short), while the guard counts itself valid for `ttl` from now.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Lost`] when the lock is gone or another owner has it;
    /// [`ErrorKind::NoQuorum`] (or the node's own kind, with one node) when not enough nodes
    /// confirmed — the lock may still be held until [`valid_until`](Guard::valid_until);
    /// [`ErrorKind::InvalidArgument`] for a TTL out of range.
    pub fn extend(&self, ttl: Duration) -> Result<(), Error> {
        self.lease().extend(ttl)
    }

    /// Registers a callback that runs once when the lock is lost (renewal failed or another
    /// owner took over; [`check`](Guard::check) then says which). It runs on the client's
    /// renew thread (or, if the loss is discovered by a call of yours, on your thread after
    /// that call); keep it short and never block in it.
    /// If the lock is already lost, it runs at once on this thread. It never starts after
    /// the guard was released (one that already started may still be running).
    pub fn on_lost(&self, callback: impl FnOnce() + Send + 'static) {
        self.lease().on_lost(callback)
    }

    /// Blocks until the lock is lost (`true`) or `timeout` passes (`false`); for watchdog
    /// threads. Returns `false` at once when the guard was released.
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        self.lease().wait_lost(timeout)
    }

    /// Releases the lock on every node (compare-and-delete: only if it still holds our token)
    /// and reports what each node did. Nodes that cannot be reached are asked again, like a
    /// lock call riding over an outage, for up to the client's connect timeout and never past
    /// the lock's validity.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Lost`] when the lock had expired or another owner had it (their value is
    /// left in place); [`ErrorKind::NoQuorum`] (or the node's own kind, with one node) when
    /// not enough nodes confirmed — the lock then expires by its TTL.
    pub fn unlock(self) -> Result<Released, Error> {
        // The release and the guard's drop read the pid once.
        let _scope = crate::process::Scope::enter();
        let released = self.lease().release();
        drop(self);
        released
    }

    /// Like [`unlock`](Guard::unlock), through a shared reference: for a guard shared
    /// between threads (in an `Arc`, or held by a binding). Afterwards the guard is released
    /// for good: [`is_held`](Guard::is_held) is false, dropping it does nothing, and a
    /// second call returns [`ErrorKind::NotHeld`].
    ///
    /// # Errors
    ///
    /// As [`unlock`](Guard::unlock), plus [`ErrorKind::NotHeld`] when already released.
    pub fn release(&self) -> Result<Released, Error> {
        self.lease().release()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if !self.lease.owned_here() || self.lease.is_released() {
            return;
        }
        match self.lease.release() {
            Ok(_) => {}
            Err(e) => log::warn!(
                "redmutex: releasing {} {} on drop: {e}",
                self.names.1,
                String::from_utf8_lossy(&self.lease.spec.keys.lock)
            ),
        }
    }
}

impl<K: Kind> std::fmt::Debug for Guard<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(self.held.names.0)
            .field(
                "name",
                &String::from_utf8_lossy(&self.lease().spec.keys.lock),
            )
            .field("fence", &self.lease().fence)
            .field("held", &self.is_held())
            .finish_non_exhaustive()
    }
}
