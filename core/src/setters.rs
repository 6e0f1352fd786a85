//! The builder-style option setters that every lock handle shares, as a macro, so that
//! each handle's docs list them as its own.

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

            /// The lock's name (its Redis key), as given.
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
