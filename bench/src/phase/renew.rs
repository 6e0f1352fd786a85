//! Renew scale: thousands of locks held and renewed by one client's one renew thread; and the
//! memory a `try_lock` + `unlock` cycle keeps.

use crate::phase::{Ctx, Phase, progress};
use crate::renew::{self, Churn, Renew};
use crate::report::{Mark, Row};
use crate::stats::{fmt_ns, sig3, thousands};

/// Runs both; the data is the renew scale's (the churn has only its row).
pub fn run(ctx: &Ctx) -> Result<Phase<Renew>, String> {
    let counts = ctx.counts;
    progress(&format!(
        "renew scale: {} locks for {} s",
        thousands(counts.renew_locks as u64),
        counts.renew_hold.as_secs()
    ));
    let renew = renew::run(
        &ctx.url,
        counts.renew_locks,
        counts.renew_hold,
        counts.renew_ttl,
    )?;
    progress(&format!(
        "lock churn: {} try_lock + unlock cycles",
        thousands(counts.churn as u64)
    ));
    let churn = renew::churn(&ctx.url, counts.churn)?;
    Ok(Phase {
        rows: rows(&renew, &churn),
        data: renew,
    })
}

fn rows(ren: &Renew, churn: &Churn) -> Vec<Row> {
    let lost = ren.lost.max(ren.lost_redis);
    let per_cycle = churn.growth.max(0) as f64 / churn.cycles.max(1) as f64;
    vec![
        Row::value(
            format!(
                "renew scale: locks lost ({} × TTL {} s, {} s)",
                thousands(ren.locks),
                sig3(ren.ttl_ns as f64 / 1e9),
                sig3(ren.hold_ns as f64 / 1e9)
            ),
            format!(
                "{} (renewals per lock: min {}, median {}; least PTTL left {} ms)",
                lost, ren.min_renewals, ren.median_renewals, ren.min_pttl_ms
            ),
        )
        .target("= 0", Mark::of(lost == 0)),
        Row::value(
            "renew scale: renew threads",
            format!(
                "{} (its CPU: {} in {})",
                ren.renew_threads,
                fmt_ns(ren.renew_cpu_ns),
                fmt_ns(ren.hold_ns)
            ),
        )
        .target("= 1", Mark::of(ren.renew_threads == 1)),
        Row::value(
            "renew scale: resident memory growth",
            format!(
                "{:.1} MB (after release {:+.1} MB)",
                ren.rss_growth as f64 / 1e6,
                ren.rss_after_release as f64 / 1e6
            ),
        )
        .target("< 20 MB", Mark::of(ren.rss_growth < 20_000_000)),
        Row::value(
            "lock churn: memory kept per try_lock + unlock",
            format!(
                "{per_cycle:.0} B ({} cycles in {}: {:+.1} MB)",
                thousands(churn.cycles),
                fmt_ns(churn.elapsed_ns),
                churn.growth as f64 / 1e6
            ),
        )
        .target("< 100 B", Mark::of(per_cycle < 100.0)),
    ]
}
