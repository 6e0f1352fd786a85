//! The methods every guard shares with [`MutexGuard`](crate::MutexGuard): a handle on a
//! lease (`lock/lease.rs`), whatever kind of lock granted it. A macro, so each guard type has
//! its own name in the docs and in `must_use` messages.

/// Implements the lease methods, `Drop` and `Debug` for a guard type with a `lease` field.
macro_rules! lease_guard {
    ($guard:ident, $what:literal) => {
        impl $guard {
            #[doc = concat!("The fence number of this ", $what, " (0 when fencing is off); ")]
            /// see the type's documentation for what it promises. Pass it to the resource
            /// you protect.
            pub fn fence(&self) -> u64 {
                self.lease.fence
            }

            /// The token: this hold's value in Redis (`owner-label:random-hex`).
            pub fn token(&self) -> &[u8] {
                &self.lease.token
            }

            /// The lock's name, as given.
            pub fn name(&self) -> &[u8] {
                &self.lease.spec.keys.lock
            }

            /// Whether we still hold it, answered locally: not released, not reported lost
            /// and before the validity deadline. Always false in a forked child.
            pub fn is_held(&self) -> bool {
                self.lease.is_held()
            }

            /// `Ok` while [`is_held`](Self::is_held); no network.
            ///
            /// # Errors
            ///
            /// [`ErrorKind::Lost`](crate::ErrorKind::Lost) once it expired or was taken
            /// over, saying why; [`ErrorKind::NotHeld`](crate::ErrorKind::NotHeld) after a
            /// release or in a forked child.
            pub fn check(&self) -> Result<(), crate::Error> {
                self.lease.check()
            }

            /// The local validity deadline: until then, the lock's promise holds (given
            /// the bounded clock drift the Redlock text assumes). Renewal moves it forward.
            /// See [`MutexGuard::valid_until`](crate::MutexGuard::valid_until) about
            /// suspends.
            pub fn valid_until(&self) -> std::time::Instant {
                self.lease.valid_until()
            }

            /// Calls `observer` with the new [`valid_until`](Self::valid_until) right after
            /// every confirmed renewal, on the thread that renewed. For the project's test
            /// drivers; not part of the stable API.
            #[doc(hidden)]
            pub fn on_renewed(
                &self,
                observer: impl Fn(std::time::Instant) + Send + Sync + 'static,
            ) {
                self.lease.on_renewed(std::sync::Arc::new(observer));
            }

            /// How many renewals (automatic or [`extend`](Self::extend)) succeeded so far.
            pub fn renewals(&self) -> u64 {
                self.lease.renewals()
            }

            /// Extends the lease to `ttl` from now, checking our token; later automatic
            /// renewals use this `ttl` too. Never re-creates a hold that is gone.
            ///
            /// The servers only ever lengthen an expiry: with a `ttl` shorter than the hold
            /// has left, it keeps its later expiry there (a request that arrives late must
            /// never cut a longer lease short), while the guard counts itself valid for `ttl`
            /// from now.
            ///
            /// # Errors
            ///
            /// As [`MutexGuard::extend`](crate::MutexGuard::extend).
            pub fn extend(&self, ttl: std::time::Duration) -> Result<(), crate::Error> {
                self.lease.extend(ttl)
            }

            /// Registers a callback that runs once when the hold is lost, on the client's
            /// renew thread (at once on this thread when it already is); never after a
            /// release. Keep it short; never block in it.
            pub fn on_lost(&self, callback: impl FnOnce() + Send + 'static) {
                self.lease.on_lost(callback)
            }

            /// Blocks until the hold is lost (`true`) or `timeout` passes (`false`); `false`
            /// at once when it was released.
            pub fn wait_lost(&self, timeout: std::time::Duration) -> bool {
                self.lease.wait_lost(timeout)
            }

            /// Releases it on every node (only our own hold, checked by token) and wakes one
            /// waiter; reports what each node did.
            ///
            /// # Errors
            ///
            /// As [`MutexGuard::unlock`](crate::MutexGuard::unlock).
            pub fn unlock(self) -> Result<crate::Released, crate::Error> {
                // The release and the guard's drop read the pid once.
                let _scope = crate::process::Scope::enter();
                let released = self.lease.release();
                drop(self);
                released
            }

            /// Like [`unlock`](Self::unlock), through a shared reference; afterwards the
            /// guard is released for good and dropping it does nothing.
            ///
            /// # Errors
            ///
            /// As [`unlock`](Self::unlock), plus
            /// [`ErrorKind::NotHeld`](crate::ErrorKind::NotHeld) when already released.
            pub fn release(&self) -> Result<crate::Released, crate::Error> {
                self.lease.release()
            }
        }

        impl Drop for $guard {
            fn drop(&mut self) {
                if !self.lease.owned_here() || self.lease.is_released() {
                    return;
                }
                if let Err(e) = self.lease.release() {
                    log::warn!(
                        "redmutex: releasing {} {} on drop: {e}",
                        $what,
                        String::from_utf8_lossy(&self.lease.spec.keys.lock)
                    );
                }
            }
        }

        impl std::fmt::Debug for $guard {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($guard))
                    .field("name", &String::from_utf8_lossy(&self.lease.spec.keys.lock))
                    .field("fence", &self.lease.fence)
                    .field("held", &self.is_held())
                    .finish_non_exhaustive()
            }
        }
    };
}

pub(crate) use lease_guard;

/// The builder-style option setters of a lock handle with an `opts` field, as on
/// [`Mutex`](crate::Mutex).
macro_rules! option_setters {
    ($lock:ident) => {
        impl $lock {
            /// Sets the lease (default 30 s; 10 ms to 24 h).
            pub fn ttl(mut self, ttl: std::time::Duration) -> Self {
                self.opts.ttl = ttl;
                self
            }

            /// Whether the client's renew thread keeps each hold while its guard lives
            /// (default true).
            pub fn auto_renew(mut self, on: bool) -> Self {
                self.opts.auto_renew = on;
                self
            }

            /// Stops renewal this long after a hold was taken (default: never stops).
            pub fn max_hold(mut self, max_hold: std::time::Duration) -> Self {
                self.opts.max_hold = Some(max_hold);
                self
            }

            /// Whether grants carry fence numbers (default true).
            pub fn fencing(mut self, on: bool) -> Self {
                self.opts.fencing = on;
                self
            }

            /// The per-node, per-request timeout (default derived from the TTL).
            pub fn node_timeout(mut self, timeout: std::time::Duration) -> Self {
                self.opts.node_timeout = Some(timeout);
                self
            }

            /// Replaces all options at once.
            pub fn options(mut self, opts: crate::MutexOptions) -> Self {
                self.opts = opts;
                self
            }

            /// The current options.
            pub fn current_options(&self) -> &crate::MutexOptions {
                &self.opts
            }

            /// The lock's name, as given.
            pub fn name(&self) -> &[u8] {
                &self.keys.lock
            }

            /// The client this lock belongs to.
            pub fn client(&self) -> &crate::Client {
                &self.client
            }
        }
    };
}

pub(crate) use option_setters;
