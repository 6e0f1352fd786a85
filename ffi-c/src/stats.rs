//! `redmutex_client_stats`: what a client's locks did, as a versioned struct.

use std::mem::{offset_of, size_of};

use redmutex::{HISTOGRAM_BOUNDS, Histogram};

use crate::client::redmutex_client;
use crate::ptr::arg;
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

/// What one client's locks (every kind) did since it was made, and what they hold and wait
/// for now: counters the library keeps as it goes. Filled by `redmutex_client_stats`.
///
/// Versioned by its size: set `size` to `sizeof(redmutex_stats)` before the call. A later
/// version of the library only adds fields at the end, and fills no more than `size` bytes, so
/// a program built against this header keeps working.
///
/// An acquisition call ends in exactly one of `acquired`, `refused`, `timed_out`,
/// `interrupted` and `failed`; the `lost_*` fields add up to `lost`.
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
