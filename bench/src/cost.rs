//! What a cycle costs besides its latency, for the notes: the server's time per call (`INFO
//! commandstats`) and the CPU a cycle takes in the client and in every server it asks
//! (`/proc/…/schedstat`).

use crate::lockers::RedmutexLocker;
use crate::uncontended::{FencedFloor, PlainFloor, conn, try_unlock};

/// Server-side time, from `INFO commandstats`, for telling the client's share of a row from
/// Redis's own.
pub struct ServerTime {
    pub ping_us: f64,
    /// Every command's time per try_lock + unlock: redmutex's (fenced, and with fencing off),
    /// and the fenced floor's (its two scripts) and the scriptless floor's (`SET NX PX`,
    /// `INCR`, compare-and-delete).
    pub redmutex_us: f64,
    pub unfenced_us: f64,
    pub fenced_us: f64,
    pub plain_us: f64,
}

pub fn server_time(url: &str, n: usize) -> Result<ServerTime, String> {
    let mut admin = conn(url)?;
    let mut ping_conn = conn(url)?;
    let mut m1 = RedmutexLocker::open(&[url.to_owned()], "bench:server-time")?;
    let mut u1 = RedmutexLocker::unfenced(&[url.to_owned()], "bench:server-time:unfenced")?;
    let mut fenced = FencedFloor::open(url)?;
    let mut plain = PlainFloor::open(url)?;
    let mut per_op = |cycle: &mut dyn FnMut() -> Result<(), String>| -> Result<f64, String> {
        cycle()?;
        reset(&mut admin)?;
        for _ in 0..n {
            cycle()?;
        }
        Ok(commandstats_us(&mut admin)? / n.max(1) as f64)
    };
    let ping_us = per_op(&mut || {
        redis::cmd("PING")
            .query::<String>(&mut ping_conn)
            .map(drop)
            .map_err(|e| e.to_string())
    })?;
    Ok(ServerTime {
        ping_us,
        redmutex_us: per_op(&mut || try_unlock(&mut m1))?,
        unfenced_us: per_op(&mut || try_unlock(&mut u1))?,
        fenced_us: per_op(&mut || fenced.cycle())?,
        plain_us: per_op(&mut || plain.cycle())?,
    })
}

/// The CPU time one `try_lock` + `unlock` takes, in the client's thread and in all the
/// servers it asks: on a machine with fewer CPUs than processes, a cycle can take no less than
/// its CPU time over the CPUs that run it, however well the round runs in parallel.
pub struct CpuPerCycle {
    pub client_us: f64,
    pub servers_us: f64,
    /// The mean time a cycle of the same measure took (a floor made of mean CPU times
    /// compares with a mean, not with a row's median).
    pub wall_us: f64,
}

impl CpuPerCycle {
    /// The least a cycle can take here: the servers' CPU time on their one CPU, or the
    /// client's over its own, whichever is more (pinned apart, see `pin.rs`); unpinned, all
    /// its CPU time spread over every CPU.
    pub fn floor_ns(&self) -> u64 {
        let cpus = crate::pin::current();
        let us = match cpus.clients {
            Some(clients) => (self.client_us / clients as f64).max(self.servers_us),
            None => (self.client_us + self.servers_us) / cpus.machine as f64,
        };
        (us * 1000.0) as u64
    }

    /// The mean time a cycle took while its CPU was measured, in ns.
    pub fn wall_ns(&self) -> u64 {
        (self.wall_us * 1000.0) as u64
    }
}

/// A cycle whose CPU is measured: one `try_lock` + `unlock`, or a floor's requests.
pub type Cycle<'a> = &'a mut dyn FnMut() -> Result<(), String>;

/// Measures [`CpuPerCycle`] over `n` cycles of `cycle` on `urls` (servers on this machine,
/// found by the `process_id` they report).
pub fn cpu_per_cycle(urls: &[String], n: usize, cycle: Cycle) -> Result<CpuPerCycle, String> {
    let mut one = [cycle];
    Ok(cpu_per_cycle_alternating(urls, n, &mut one)?.remove(0))
}

/// Measures [`CpuPerCycle`] of each of `cycles`, `n` cycles each on the same `urls`, in
/// alternating blocks: measured one after the other, whichever ran first looked dearer in
/// the server (by up to 40 % in quick runs, either way round), so a comparison between them
/// needs them to share the machine's drift.
pub fn cpu_per_cycle_alternating(
    urls: &[String],
    n: usize,
    cycles: &mut [Cycle],
) -> Result<Vec<CpuPerCycle>, String> {
    const BLOCKS: usize = 10;
    let mut pids = Vec::new();
    for url in urls {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut conn(url)?)
            .map_err(|e| e.to_string())?;
        let pid = info
            .lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .ok_or("no process_id in INFO server")?;
        pids.push(pid.trim().to_owned());
    }
    for cycle in cycles.iter_mut() {
        for _ in 0..50 {
            cycle()?;
        }
    }
    let servers = || -> Result<u64, String> { pids.iter().map(|p| cpu_ns(p)).sum() };
    let per_block = n.div_ceil(BLOCKS);
    let mut spent = vec![(0, 0, 0); cycles.len()];
    for _ in 0..BLOCKS {
        for (cycle, spent) in cycles.iter_mut().zip(&mut spent) {
            let (c0, s0) = (cpu_ns("thread-self")?, servers()?);
            let t0 = std::time::Instant::now();
            for _ in 0..per_block {
                cycle()?;
            }
            let wall = t0.elapsed().as_nanos() as u64;
            let (c1, s1) = (cpu_ns("thread-self")?, servers()?);
            *spent = (spent.0 + c1 - c0, spent.1 + s1 - s0, spent.2 + wall);
        }
    }
    let per = |ns: u64| ns as f64 / 1000.0 / (per_block * BLOCKS) as f64;
    Ok(spent
        .into_iter()
        .map(|(client, servers, wall)| CpuPerCycle {
            client_us: per(client),
            servers_us: per(servers),
            wall_us: per(wall),
        })
        .collect())
}

/// The CPU time a thread has run so far, in ns (`/proc/…/schedstat`): `thread-self` for the
/// calling thread (the one that runs the cycles), a server's pid for its main thread (where
/// Redis runs every command).
fn cpu_ns(task: &str) -> Result<u64, String> {
    let path = format!("/proc/{task}/schedstat");
    let stat = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    stat.split_whitespace()
        .next()
        .and_then(|ns| ns.parse().ok())
        .ok_or_else(|| format!("{path}: no run time"))
}

fn reset(c: &mut redis::Connection) -> Result<(), String> {
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query::<()>(c)
        .map_err(|e| e.to_string())
}

/// The time every command took since the last reset, in µs (`INFO` itself is counted after
/// it answers).
fn commandstats_us(c: &mut redis::Connection) -> Result<f64, String> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(c)
        .map_err(|e| e.to_string())?;
    let total = info
        .lines()
        .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_config"))
        .filter_map(|l| {
            l.split([',', ':'])
                .find_map(|kv| kv.strip_prefix("usec="))
                .and_then(|us| us.parse::<f64>().ok())
        })
        .sum();
    Ok(total)
}
