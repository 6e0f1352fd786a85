//! `redmutex_client_stats`: what a client's locks did, as a versioned struct, and
//! `redmutex_client_connections`: the connections open to each node.

use std::mem::{offset_of, size_of};

use redmutex::{HISTOGRAM_BOUNDS, Histogram, Outcomes};

use crate::client::redmutex_client;
use crate::ptr::{Out, arg, copy_items};
use crate::result::{Failure, boundary, redmutex_result};

/// How many bucket bounds a `redmutex_histogram` has.
pub const REDMUTEX_HISTOGRAM_BOUNDS: usize = 17;

/// How many buckets a `redmutex_histogram` has: one per bound, and one past the last.
pub const REDMUTEX_HISTOGRAM_BUCKETS: usize = 18;

/// Durations in fixed buckets, in seconds.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct redmutex_histogram {
    /// How many durations fell in each bucket: `buckets[i]` counts those above `bounds[i - 1]`
    /// (0 for the first) and at most `bounds[i]`; the last one those above the last bound.
    /// Not cumulative.
    pub buckets: [u64; REDMUTEX_HISTOGRAM_BUCKETS],
    /// The buckets' upper bounds, in seconds: 100 µs to 60 s (the same in every histogram).
    pub bounds: [f64; REDMUTEX_HISTOGRAM_BOUNDS],
    /// How many durations were recorded.
    pub count: u64,
    /// Their sum, in seconds.
    pub sum: f64,
}

/// How one kind of lock's acquisition calls ended: each call in exactly one field (as in
/// `redmutex_stats`, whose totals these add up to over the three kinds).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct redmutex_outcomes {
    /// Granted.
    pub acquired: u64,
    /// Refused at once (`REDMUTEX_RESULT_WOULD_BLOCK` with a wait of 0).
    pub refused: u64,
    /// Their wait ran out (`REDMUTEX_RESULT_WOULD_BLOCK` after waiting).
    pub timed_out: u64,
    /// Ended by their interrupt callback (`REDMUTEX_RESULT_INTERRUPTED`).
    pub interrupted: u64,
    /// Failed with another error.
    pub failed: u64,
}

/// What one client's locks (every kind) did since it was made, and what they hold and wait
/// for now: counters the library keeps as it goes. Filled by `redmutex_client_stats`.
///
/// Versioned by its size: set `size` to `sizeof(redmutex_stats)` before the call. A later
/// version of the library only adds fields at the end, and fills no more than `size` bytes, so
/// a program built against this header keeps working.
///
/// An acquisition call ends in exactly one of `acquired`, `refused`, `timed_out`,
/// `interrupted` and `failed`; the `lost_*` fields add up to `lost`, and the `by_kind_*`
/// fields to those five.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct redmutex_stats {
    /// In: the size of the caller's struct (`sizeof(redmutex_stats)`). Out: how many bytes
    /// the library filled (the smaller of that and its own struct's size).
    pub size: usize,
    /// Acquisitions granted.
    pub acquired: u64,
    /// Acquisitions refused at once (`REDMUTEX_RESULT_WOULD_BLOCK` with a wait of 0).
    pub refused: u64,
    /// Acquisitions whose wait ran out (`REDMUTEX_RESULT_WOULD_BLOCK` after waiting).
    pub timed_out: u64,
    /// Acquisitions ended by their interrupt callback (`REDMUTEX_RESULT_INTERRUPTED`).
    pub interrupted: u64,
    /// Acquisitions that failed with another error (no quorum, no connection, ...).
    pub failed: u64,
    /// Held locks lost (not released by their owner first), whatever the reason.
    pub lost: u64,
    /// Lost to another owner (a renewal or the release was refused with its token).
    pub lost_another_owner: u64,
    /// Lost because the key was gone at a renewal or the release (expired, deleted, evicted).
    pub lost_gone: u64,
    /// Lost because too many nodes were down to renew it in time.
    pub lost_nodes_down: u64,
    /// Lost because its validity ran out before a renewal was confirmed.
    pub lost_validity_ran_out: u64,
    /// Lost because its `max_hold` ran out.
    pub lost_max_hold: u64,
    /// Renewals the renew thread got confirmed.
    pub renewals: u64,
    /// Renewal rounds that were not confirmed.
    pub renewal_failures: u64,
    /// Leases held now.
    pub held_now: u64,
    /// Acquisition calls that may wait and have not returned yet.
    pub waiting_now: u64,
    /// For every granted acquisition, the time from the call to the grant.
    pub wait_seconds: redmutex_histogram,
    /// For every lease that ended (released or lost), how long it was held.
    pub held_seconds: redmutex_histogram,
    // The struct of older headers ended here; new fields only ever go at the end, and a
    // program reads one only when it ends within the `size` the library filled.
    /// Mutex acquisitions (`redmutex_lock*`, and the write side of read-write locks:
    /// `redmutex_write_lock*`), by how they ended.
    pub by_kind_mutex: redmutex_outcomes,
    /// Semaphore permits (`redmutex_semaphore_acquire*`), by how they ended.
    pub by_kind_semaphore: redmutex_outcomes,
    /// Read holds of read-write locks (`redmutex_read_lock*`), by how they ended.
    pub by_kind_read: redmutex_outcomes,
    /// Acquisitions granted after waiting for a release (hand-offs received): woken by a
    /// release, or finding the lock free when a wait ended.
    pub handoffs: u64,
    /// For every renewal the renew thread sent, how late it was against its schedule: the
    /// renew thread falling behind is the first sign of trouble, long before a lease runs
    /// out.
    pub renewal_lag_seconds: redmutex_histogram,
    /// Connections open now, to all nodes together (`redmutex_client_connections` gives
    /// each node's).
    pub connections_open: u64,
}

/// Fills `*stats` with what `client`'s locks did so far. Set `stats->size` to
/// `sizeof(redmutex_stats)` first. Local, no network; any thread.
///
/// Returns `REDMUTEX_RESULT_OK`; `REDMUTEX_RESULT_NULL_PARAMETER` when `client` or `stats` is
/// NULL; `REDMUTEX_RESULT_INVALID_ARGUMENT` when `stats->size` is too small to hold the
/// first counter (it was not set).
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_client_stats(
    client: *const redmutex_client,
    stats: *mut redmutex_stats,
) -> redmutex_result {
    // Private items live in this body because cbindgen warns about every non-`pub` item it
    // meets at module level.
    const _: () = assert!(HISTOGRAM_BOUNDS.len() == REDMUTEX_HISTOGRAM_BOUNDS);
    const _: () = assert!(REDMUTEX_HISTOGRAM_BOUNDS + 1 == REDMUTEX_HISTOGRAM_BUCKETS);

    fn histogram(h: &Histogram) -> redmutex_histogram {
        let mut out = redmutex_histogram {
            buckets: [0; REDMUTEX_HISTOGRAM_BUCKETS],
            bounds: HISTOGRAM_BOUNDS,
            count: h.count,
            sum: h.sum,
        };
        for (o, b) in out.buckets.iter_mut().zip(&h.buckets) {
            *o = *b;
        }
        out
    }

    fn outcomes(o: &Outcomes) -> redmutex_outcomes {
        redmutex_outcomes {
            acquired: o.acquired,
            refused: o.refused,
            timed_out: o.timed_out,
            interrupted: o.interrupted,
            failed: o.failed,
        }
    }

    boundary(|| {
        let client = arg(client, "client")?;
        if stats.is_null() {
            return Err(Failure::null("stats"));
        }
        // SAFETY: non-NULL; the caller's struct starts with its size.
        let size = unsafe { stats.cast::<usize>().read_unaligned() };
        let least = offset_of!(redmutex_stats, acquired) + size_of::<u64>();
        if size < least {
            return Err(Failure::invalid(format!(
                "stats->size is {size}: set it to sizeof(redmutex_stats)"
            )));
        }
        let s = client.client.stats();
        let filled = size.min(size_of::<redmutex_stats>());
        let out = redmutex_stats {
            size: filled,
            acquired: s.acquired,
            refused: s.refused,
            timed_out: s.timed_out,
            interrupted: s.interrupted,
            failed: s.failed,
            lost: s.lost,
            lost_another_owner: s.lost_by.another_owner,
            lost_gone: s.lost_by.gone,
            lost_nodes_down: s.lost_by.nodes_down,
            lost_validity_ran_out: s.lost_by.validity_ran_out,
            lost_max_hold: s.lost_by.max_hold,
            renewals: s.renewals,
            renewal_failures: s.renewal_failures,
            held_now: s.held_now,
            waiting_now: s.waiting_now,
            wait_seconds: histogram(&s.wait_seconds),
            held_seconds: histogram(&s.held_seconds),
            by_kind_mutex: outcomes(&s.by_kind.mutex),
            by_kind_semaphore: outcomes(&s.by_kind.semaphore),
            by_kind_read: outcomes(&s.by_kind.read),
            handoffs: s.handoffs,
            renewal_lag_seconds: histogram(&s.renewal_lag_seconds),
            connections_open: s.connections.iter().sum(),
        };
        // SAFETY: the caller's struct has `size` writable bytes, and `filled <= size` and
        // `filled <= size_of::<redmutex_stats>()`; the two do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                std::ptr::from_ref(&out).cast::<u8>(),
                stats.cast::<u8>(),
                filled,
            );
        }
        Ok(())
    })
}

/// Copies how many connections `client` has open now to each node, in the order of the
/// client's URLs (a `redis+cluster://` URL is one node, counting every master's; a node's
/// count covers its pool's idle connections, those in use and the one a wait blocks on), into
/// `out`: at most `len` counts, and `*out_n` set to the number of nodes (the counts were cut
/// short when `*out_n > len`). `out` may be NULL only when `len` is 0, to learn the number.
/// Local, no network; any thread. `redmutex_stats.connections_open` is their sum.
///
/// Returns `REDMUTEX_RESULT_OK`, or `REDMUTEX_RESULT_NULL_PARAMETER` when `client` or `out_n`
/// is NULL, or `out` is NULL while `len` is not 0.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_client_connections(
    client: *const redmutex_client,
    out: *mut u64,
    len: usize,
    out_n: *mut usize,
) -> redmutex_result {
    boundary(|| {
        let client = arg(client, "client")?;
        let out_n = Out::new(out_n, "out_n")?;
        let nodes = copy_items(&client.client.stats().connections, out, len, "out")?;
        out_n.write(nodes);
        Ok(())
    })
}
