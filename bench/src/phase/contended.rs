//! Contended: several processes take one lock in a loop, each section a non-atomic update of a
//! counter that only the lock keeps exact.

use crate::contended;
use crate::phase::{Ctx, Phase, progress};
use crate::report::{Mark, Row};
use crate::stats::{fmt_ns, thousands};

pub fn run(ctx: &Ctx) -> Result<Phase<contended::Contended>, String> {
    let counts = ctx.counts;
    progress(&format!(
        "contended: {} processes × {} sections",
        counts.processes, counts.sections
    ));
    let cont = contended::run(&ctx.url, counts.processes, counts.sections)?;
    Ok(Phase {
        rows: rows(&cont, ctx.base),
        data: cont,
    })
}

fn rows(cont: &contended::Contended, base: u64) -> Vec<Row> {
    let min_tp = 1e9 / (5.0 * base.max(1) as f64);
    let total = cont.processes * cont.per_process;
    let min_share = cont.shares.iter().copied().fold(f64::INFINITY, f64::min);
    vec![
        Row::latency(
            format!(
                "contended: wait in lock() ({} × {})",
                cont.processes, cont.per_process
            ),
            cont.wait.clone(),
        ),
        Row::value(
            "contended: throughput",
            format!(
                "{} sections/s ({} in {})",
                thousands(cont.throughput.round() as u64),
                thousands(total as u64),
                fmt_ns(cont.elapsed_ns)
            ),
        )
        .target(
            format!(
                "≥ {}/s = 1/(5 × baseline)",
                thousands(min_tp.round() as u64)
            ),
            Mark::of(cont.throughput >= min_tp),
        ),
        Row::value(
            "contended: owner switches",
            format!(
                "{} of {}",
                thousands(cont.owner_switches as u64),
                thousands(total.saturating_sub(1) as u64)
            ),
        ),
        Row::value("contended: lost updates", cont.lost_updates.to_string())
            .target("= 0", Mark::of(cont.lost_updates == 0)),
        Row::value(
            "contended: share per process",
            format!(
                "{} % of the first {} sections",
                cont.shares
                    .iter()
                    .map(|s| format!("{:.0}", s * 100.0))
                    .collect::<Vec<_>>()
                    .join(" / "),
                thousands(cont.window as u64)
            ),
        )
        .target("each ≥ 10%", Mark::of(min_share >= 0.10)),
    ]
}
