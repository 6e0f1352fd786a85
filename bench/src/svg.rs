//! The plot in BENCHMARKS.md, as hand-written SVG: the handoff latency distribution of every
//! implementation (a CDF on a log time axis), and the contended run's per-process shares and
//! waits.

use std::fmt::Write;

use crate::stats::{Samples, fmt_ns};

pub struct Series<'a> {
    pub label: &'a str,
    pub samples: &'a Samples,
}

pub struct Plot<'a> {
    pub handoff: Vec<Series<'a>>,
    pub baseline_ns: u64,
    /// Per process: share of the sections while all ran (0..1), wait p50, wait p99.
    pub processes: Vec<(f64, u64, u64)>,
    pub title: &'a str,
}

const W: f64 = 800.0;
const H: f64 = 640.0;
const COLORS: [&str; 8] = [
    "#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

pub fn render(p: &Plot) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="18" font-size="13" font-weight="bold" text-anchor="middle">{}</text>"#,
        W / 2.0,
        esc(p.title)
    );
    handoff_panel(&mut s, p, 40.0, 360.0);
    contended_panel(&mut s, p, 400.0, 640.0);
    s.push_str("</svg>\n");
    s
}

/// CDF of each series, x = log10(latency).
fn handoff_panel(s: &mut String, p: &Plot, top: f64, bottom: f64) {
    let (x0, x1) = (70.0, W - 240.0);
    let (y0, y1) = (bottom - 40.0, top + 20.0);
    let all = p
        .handoff
        .iter()
        .flat_map(|sr| sr.samples.sorted().iter().copied())
        .chain([p.baseline_ns.max(1)]);
    let (lo, hi) = all.fold((u64::MAX, 0u64), |(lo, hi), v| {
        (lo.min(v.max(1)), hi.max(v))
    });
    if hi == 0 {
        return;
    }
    let dlo = (lo as f64).log10().floor();
    let dhi = (hi as f64).log10().ceil().max(dlo + 1.0);
    let xf = |ns: u64| x0 + ((ns.max(1) as f64).log10() - dlo) / (dhi - dlo) * (x1 - x0);
    let yf = |q: f64| y0 + q * (y1 - y0);
    let _ = writeln!(
        s,
        r#"<text x="{x0}" y="{}" font-size="12" font-weight="bold">Handoff: unlock in one process → lock returns in the waiting one (CDF)</text>"#,
        top + 8.0
    );
    // Grid: decades and quarters.
    let mut d = dlo;
    while d <= dhi + 1e-9 {
        let x = x0 + (d - dlo) / (dhi - dlo) * (x1 - x0);
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{y0}" x2="{x:.1}" y2="{y1}" stroke="#ddd"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"##,
            y0 + 14.0,
            esc(&fmt_ns(10f64.powf(d).round() as u64))
        );
        d += 1.0;
    }
    for (q, label) in [
        (0.0, "0%"),
        (0.25, "25%"),
        (0.5, "50%"),
        (0.75, "75%"),
        (0.99, "p99"),
        (1.0, ""),
    ] {
        let y = yf(q);
        let _ = writeln!(
            s,
            r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#{}"/><text x="{}" y="{:.1}" text-anchor="end">{label}</text>"##,
            if label == "50%" || label == "p99" {
                "bbb"
            } else {
                "eee"
            },
            x0 - 6.0,
            y + 4.0,
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">latency (log scale)</text>"#,
        (x0 + x1) / 2.0,
        y0 + 30.0
    );
    // Reference lines: the baseline round trip and the target (3× of it).
    for (mult, color, label) in [(1.0, "#555", "PING"), (3.0, "#d62728", "3× PING")] {
        let x = xf((p.baseline_ns as f64 * mult) as u64);
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{y0}" x2="{x:.1}" y2="{y1}" stroke="{color}" stroke-dasharray="4 3"/><text x="{:.1}" y="{}" fill="{color}" font-size="10">{label}</text>"##,
            x + 3.0,
            y1 + 10.0 + if mult > 1.0 { 12.0 } else { 0.0 }
        );
    }
    for (i, sr) in p.handoff.iter().enumerate() {
        let color = if sr.label.starts_with("RPUSH") {
            "#aaaaaa"
        } else {
            COLORS[i % COLORS.len()]
        };
        let v = sr.samples.sorted();
        if v.is_empty() {
            continue;
        }
        // At most ~300 points per curve: every k-th sample plus the last.
        let k = (v.len() / 300).max(1);
        let mut pts = String::new();
        let n = v.len() as f64;
        let mut idx: Vec<usize> = (0..v.len()).step_by(k).collect();
        if idx.last() != Some(&(v.len() - 1)) {
            idx.push(v.len() - 1);
        }
        for j in idx {
            let _ = write!(pts, "{:.1},{:.1} ", xf(v[j]), yf((j + 1) as f64 / n));
        }
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="1.8" points="{}"/>"#,
            pts.trim_end()
        );
        let ly = y1 + 14.0 + i as f64 * 28.0;
        let _ = writeln!(
            s,
            r##"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{}</text><text x="{}" y="{}" fill="#555" font-size="10">median {} · p99 {}</text>"##,
            x1 + 12.0,
            x1 + 30.0,
            x1 + 36.0,
            ly + 4.0,
            esc(sr.label),
            x1 + 36.0,
            ly + 16.0,
            esc(&fmt_ns(sr.samples.median())),
            esc(&fmt_ns(sr.samples.p99()))
        );
    }
}

/// Two bar charts: share of sections while all processes ran, and wait p50/p99 per process.
fn contended_panel(s: &mut String, p: &Plot, top: f64, bottom: f64) {
    if p.processes.is_empty() {
        return;
    }
    let n = p.processes.len();
    let _ = writeln!(
        s,
        r#"<text x="70" y="{}" font-size="12" font-weight="bold">Contended: {n} processes, read-modify-write sections (redmutex)</text>"#,
        top + 8.0
    );
    let (y0, y1) = (bottom - 40.0, top + 30.0);

    // Left: shares, 0..50 %.
    let (x0, x1) = (70.0, 330.0);
    let max_share = p
        .processes
        .iter()
        .map(|t| t.0)
        .fold(0.5f64, f64::max)
        .min(1.0);
    let ys = |v: f64| y0 + v / max_share * (y1 - y0);
    for pct in [0.0, 0.1, 0.25, 0.5, 0.75, 1.0] {
        if pct > max_share + 1e-9 {
            continue;
        }
        let y = ys(pct);
        let color = match pct {
            x if (x - 0.1).abs() < 1e-9 => "#d62728",
            x if (x - 0.25).abs() < 1e-9 => "#999",
            _ => "#eee",
        };
        let _ = writeln!(
            s,
            r#"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="{color}"/><text x="{}" y="{:.1}" text-anchor="end">{:.0}%</text>"#,
            x0 - 6.0,
            y + 4.0,
            pct * 100.0
        );
    }
    let slot = (x1 - x0) / n as f64;
    for (i, (share, _, _)) in p.processes.iter().enumerate() {
        let x = x0 + i as f64 * slot + slot * 0.2;
        let y = ys(*share);
        let _ = writeln!(
            s,
            r##"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="#1f77b4"/><text x="{:.1}" y="{:.1}" text-anchor="middle">{:.1}%</text><text x="{:.1}" y="{}" text-anchor="middle">P{i}</text>"##,
            slot * 0.6,
            y0 - y,
            x + slot * 0.3,
            y - 4.0,
            share * 100.0,
            x + slot * 0.3,
            y0 + 14.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">share of sections while all ran (red: 10% floor)</text>"#,
        (x0 + x1) / 2.0,
        y0 + 30.0
    );

    // Right: wait in lock(), p50 and p99 per process, linear.
    let (x0, x1) = (430.0, W - 30.0);
    let max_wait = p.processes.iter().map(|t| t.2).max().unwrap_or(1).max(1);
    let yw = |v: u64| y0 + v as f64 / max_wait as f64 * (y1 - y0);
    for frac in [0.0, 0.25, 0.5, 0.75, 1.0] {
        let v = (max_wait as f64 * frac) as u64;
        let y = yw(v);
        let _ = writeln!(
            s,
            r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            x0 - 6.0,
            y + 4.0,
            esc(&fmt_ns(v))
        );
    }
    let slot = (x1 - x0) / n as f64;
    for (i, (_, p50, p99)) in p.processes.iter().enumerate() {
        let x = x0 + i as f64 * slot + slot * 0.15;
        let bw = slot * 0.33;
        for (j, (v, color)) in [(*p50, "#aec7e8"), (*p99, "#1f77b4")].iter().enumerate() {
            let y = yw(*v);
            let _ = writeln!(
                s,
                r#"<rect x="{:.1}" y="{y:.1}" width="{bw:.1}" height="{:.1}" fill="{color}"/>"#,
                x + j as f64 * bw,
                y0 - y
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">P{i}</text>"#,
            x + bw,
            y0 + 14.0
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" text-anchor="middle">wait in lock() per section: <tspan fill="#6b9bd1">p50</tspan> · <tspan fill="#1f77b4">p99</tspan></text>"##,
        (x0 + x1) / 2.0,
        y0 + 30.0
    );
}
