//! What waiting costs Redis when readers wait behind a writer: the server's commands per second
//! while one writer and 16 readers wait behind a held read lock, against 17 writers waiting
//! behind a held write lock (one process, one client, default options). A waiting reader that
//! must yield to a waiting writer passes a wake-up on only when it took one; before, each
//! reader whose wait ran out pushed one, and the readers woke each other while nothing was
//! released. Now one thread of the client waits on Redis for the lock, whatever its kind of
//! hold, and the others wait in the client; a writer behind a read hold announces itself at
//! the time its script read once, as one behind a write hold does.

use std::time::{Duration, Instant};

use redmutex::Client;

use crate::info::Info;
use crate::phase::{Ctx, Phase, progress};
use crate::report::{Mark, Row};

/// How many wait in each case.
const WAITERS: usize = 17;
/// The held lock's TTL: its first renewal (at a third of it) comes after the window.
const HOLD_TTL: Duration = Duration::from_secs(300);

pub fn run(ctx: &Ctx) -> Result<Phase<()>, String> {
    let url = ctx.url.as_str();
    // Each case has one thread waiting on Redis, one round per wait cap (2 s, less up to a
    // quarter at random): a window of several caps, so that where it cuts the rounds matters
    // little (a round more or less is 5 commands).
    let wait = ctx.counts.waiter_wait.max(Duration::from_secs(12));
    progress("waiting cost: 17 writers");
    let writers = commands_per_second(url, "bench:waiting:writers", false, wait)?;
    progress("waiting cost: 1 writer + 16 readers");
    let readers = commands_per_second(url, "bench:waiting:readers", true, wait)?;
    // As printed: a command more or less in the window is not a difference in what a wait
    // costs (each waits on Redis with one script of the same length per wait cap).
    let mark = if readers.round() <= writers.round() {
        Mark::Pass
    } else {
        Mark::Miss
    };
    let rows = vec![
        Row::value(
            "waiting: 17 writers behind a write hold, Redis commands/s",
            format!("{writers:.0}/s"),
        ),
        Row::value(
            "waiting: 1 writer + 16 readers behind a read hold, Redis commands/s",
            format!("{readers:.0}/s"),
        )
        .target(format!("≤ 17 writers' ({writers:.0}/s)"), mark),
    ];
    Ok(Phase { rows, data: () })
}

/// Holds `name` (a read hold when `readers`, else the write side), lets [`WAITERS`] threads
/// wait on it (the first a writer, the others readers when `readers`, else writers), and
/// counts the commands Redis ran per second over `wait` once their waits have grown. Then it
/// releases, and every waiter must get in.
fn commands_per_second(
    url: &str,
    name: &str,
    readers: bool,
    wait: Duration,
) -> Result<f64, String> {
    let client = Client::open(url).map_err(|e| e.to_string())?;
    // The hold renews itself every third of its TTL, with a script of its kind (a read hold's
    // makes more calls than a write hold's): a TTL that no renewal falls within the window
    // keeps the count to what the waiters cost.
    let lock = client.rwlock(name).ttl(HOLD_TTL);
    let (read, write) = match readers {
        true => (Some(lock.read().map_err(|e| e.to_string())?), None),
        false => (None, Some(lock.write().map_err(|e| e.to_string())?)),
    };
    let mut info = redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .map_err(|e| e.to_string())?;
    // Every waiter is blocked, and its waits have grown to the cap (250 + 500 + 1,000 ms,
    // then waits of 2 s): what a long wait costs.
    let settle = redmutex::FIRST_WAIT * 16;
    let patience = settle + wait + Duration::from_secs(10);
    let waiters: Vec<_> = (0..WAITERS)
        .map(|i| {
            let lock = client.rwlock(name).ttl(Duration::from_secs(30));
            // The writer first, so the readers queue behind it.
            std::thread::sleep(Duration::from_millis(if i == 1 { 50 } else { 0 }));
            std::thread::spawn(move || match readers && i > 0 {
                true => lock.try_read_for(patience).map(drop),
                false => lock.try_write_for(patience).map(drop),
            })
        })
        .collect();
    std::thread::sleep(settle);
    let before = commands(&mut info)?;
    let started = Instant::now();
    std::thread::sleep(wait);
    let per_second = (commands(&mut info)? - before) as f64 / started.elapsed().as_secs_f64();
    drop((read, write));
    for w in waiters {
        w.join()
            .map_err(|_| "a waiter panicked".to_owned())?
            .map_err(|e| format!("a waiter of {name} did not get in: {e}"))?;
    }
    Ok(per_second)
}

/// The server's count of commands run so far.
fn commands(info: &mut redis::Connection) -> Result<u64, String> {
    Info::read(info, "stats")?.field("total_commands_processed")
}
