//! Lock histories and their checker, for the torture suite.
//!
//! Every client of a scenario (the `torture` binary) appends one JSON line per event to a
//! history file:
//!
//! ```text
//! {"client":"c1","event":"acquire","t_ns":123,"key":"k","token":"c1:ab..","fence":7,"validity_ns":456}
//! ```
//!
//! `t_ns` is `CLOCK_MONOTONIC` (shared by all processes of one machine) and `validity_ns` is
//! the deadline the library promised at that moment, on the same clock. [`check`] reads the
//! events of all clients and reports what a correct lock never produces: two holds of one key
//! that overlap (each hold ends at its release, its reported loss, or the last validity the
//! library promised, whichever is first), fences that do not strictly increase in acquire
//! order, uses outside a hold, and releases without an acquire. [`recovery_ns`] measures the
//! time from a crash to the next acquire.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;

/// `CLOCK_MONOTONIC` now, in nanoseconds: the clock of every `t_ns` and `validity_ns`.
pub fn mono_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC) failed");
    #[allow(clippy::useless_conversion)] // time_t and c_long are i64 on 64-bit Linux only
    let ns = i64::from(ts.tv_sec) * 1_000_000_000 + i64::from(ts.tv_nsec);
    ns
}

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The library granted the lock.
    Acquire,
    /// The client released it (timestamp taken before the release was sent).
    Release,
    /// The client learnt that the lock was lost.
    Lost,
    /// The client saw a renewal (a new validity).
    Renew,
    /// The client touched the protected resource.
    Use,
}

impl Kind {
    /// The name used in the JSON lines.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Acquire => "acquire",
            Kind::Release => "release",
            Kind::Lost => "lost",
            Kind::Renew => "renew",
            Kind::Use => "use",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "acquire" => Kind::Acquire,
            "release" => Kind::Release,
            "lost" => Kind::Lost,
            "renew" => Kind::Renew,
            "use" => Kind::Use,
            _ => return None,
        })
    }
}

/// One line of a history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The client's name.
    pub client: String,
    /// What happened.
    pub event: Kind,
    /// When, on `CLOCK_MONOTONIC`.
    pub t_ns: i64,
    /// The lock's name.
    pub key: String,
    /// The guard's token (unique per grant).
    pub token: String,
    /// The guard's fence number (0: fencing off).
    pub fence: u64,
    /// The validity deadline promised at that moment, on `CLOCK_MONOTONIC`.
    pub validity_ns: i64,
}

impl Event {
    /// The event as one JSON line (without the newline).
    pub fn to_json(&self) -> String {
        format!(
            "{{\"client\":{},\"event\":\"{}\",\"t_ns\":{},\"key\":{},\"token\":{},\"fence\":{},\"validity_ns\":{}}}",
            json_string(&self.client),
            self.event.as_str(),
            self.t_ns,
            json_string(&self.key),
            json_string(&self.token),
            self.fence,
            self.validity_ns
        )
    }

    /// Parses one JSON line as written by [`Event::to_json`] (any field order, any spacing).
    pub fn parse(line: &str) -> Result<Event, String> {
        let fields = parse_flat_object(line)?;
        let s = |name: &str| match fields.get(name) {
            Some(Json::Str(s)) => Ok(s.clone()),
            _ => Err(format!("field {name:?} missing or not a string in {line}")),
        };
        let n = |name: &str| match fields.get(name) {
            Some(Json::Int(n)) => Ok(*n),
            _ => Err(format!(
                "field {name:?} missing or not an integer in {line}"
            )),
        };
        let event = s("event")?;
        Ok(Event {
            client: s("client")?,
            event: Kind::parse(&event).ok_or_else(|| format!("unknown event {event:?}"))?,
            t_ns: n("t_ns")? as i64,
            key: s("key")?,
            token: s("token")?,
            fence: u64::try_from(n("fence")?).map_err(|_| format!("negative fence in {line}"))?,
            validity_ns: n("validity_ns")? as i64,
        })
    }
}

/// `s` as a JSON string literal, quotes included.
pub fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

enum Json {
    Str(String),
    Int(i128),
}

/// A flat JSON object of strings and integers: all the history lines need.
fn parse_flat_object(line: &str) -> Result<HashMap<String, Json>, String> {
    let mut p = Parser {
        s: line.as_bytes(),
        i: 0,
    };
    let mut out = HashMap::new();
    p.ws();
    p.expect(b'{')?;
    p.ws();
    if p.peek() == Some(b'}') {
        p.i += 1;
    } else {
        loop {
            p.ws();
            let k = p.string()?;
            p.ws();
            p.expect(b':')?;
            p.ws();
            let v = if p.peek() == Some(b'"') {
                Json::Str(p.string()?)
            } else {
                Json::Int(p.int()?)
            };
            out.insert(k, v);
            p.ws();
            match p.next() {
                Some(b',') => continue,
                Some(b'}') => break,
                _ => return Err(format!("expected ',' or '}}' at {} in {line}", p.i)),
            }
        }
    }
    p.ws();
    if p.i != p.s.len() {
        return Err(format!("trailing characters in {line}"));
    }
    Ok(out)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn next(&mut self) -> Option<u8> {
        let c = self.peek();
        self.i += 1;
        c
    }
    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.i += 1;
        }
    }
    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.next() == Some(c) {
            Ok(())
        } else {
            Err(format!("expected {:?} at {}", c as char, self.i - 1))
        }
    }
    fn int(&mut self) -> Result<i128, String> {
        let start = self.i;
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
        std::str::from_utf8(&self.s[start..self.i])
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| format!("bad integer at {start}"))
    }
    fn hex4(&mut self) -> Result<u32, String> {
        let h = self.s.get(self.i..self.i + 4).ok_or("short \\u escape")?;
        self.i += 4;
        u32::from_str_radix(std::str::from_utf8(h).map_err(|e| e.to_string())?, 16)
            .map_err(|e| e.to_string())
    }
    fn string(&mut self) -> Result<String, String> {
        self.expect(b'"')?;
        let mut out = Vec::new();
        loop {
            match self.next().ok_or("unterminated string")? {
                b'"' => break,
                b'\\' => match self.next().ok_or("unterminated escape")? {
                    b'"' => out.push(b'"'),
                    b'\\' => out.push(b'\\'),
                    b'/' => out.push(b'/'),
                    b'b' => out.push(8),
                    b'f' => out.push(12),
                    b'n' => out.push(b'\n'),
                    b'r' => out.push(b'\r'),
                    b't' => out.push(b'\t'),
                    b'u' => {
                        let mut c = self.hex4()?;
                        if (0xD800..0xDC00).contains(&c) {
                            if self.next() != Some(b'\\') || self.next() != Some(b'u') {
                                return Err("lone surrogate".into());
                            }
                            let lo = self.hex4()?;
                            c = 0x10000 + ((c - 0xD800) << 10) + (lo.wrapping_sub(0xDC00) & 0x3FF);
                        }
                        let ch = char::from_u32(c).ok_or("bad \\u escape")?;
                        out.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes());
                    }
                    c => return Err(format!("bad escape \\{}", c as char)),
                },
                c => out.push(c),
            }
        }
        String::from_utf8(out).map_err(|e| e.to_string())
    }
}

/// Reads and parses every line of every file (blank lines skipped; a torn last line of a
/// killed client is skipped too). Events are returned sorted by time.
pub fn read_histories<P: AsRef<Path>>(paths: &[P]) -> Result<Vec<Event>, String> {
    let mut events = Vec::new();
    for path in paths {
        let path = path.as_ref();
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let complete = text.ends_with('\n');
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match Event::parse(line) {
                Ok(e) => events.push(e),
                Err(_) if i + 1 == lines.len() && !complete => {}
                Err(e) => return Err(format!("{}:{}: {e}", path.display(), i + 1)),
            }
        }
    }
    events.sort_by_key(|e| e.t_ns);
    Ok(events)
}

/// One grant, as the checker sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// The holder.
    pub client: String,
    /// The lock's name.
    pub key: String,
    /// The grant's token.
    pub token: String,
    /// The grant's fence.
    pub fence: u64,
    /// The acquire event's time.
    pub start_ns: i64,
    /// The first of release, reported loss and the last validity promised.
    pub end_ns: i64,
    /// The last validity the library promised for this grant.
    pub validity_ns: i64,
    /// When the client released it, if it did.
    pub released_ns: Option<i64>,
    /// When the client learnt that it was lost, if it did.
    pub lost_ns: Option<i64>,
}

/// Something a correct lock never produces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// Two holds of one key overlap, by `overlap_ns`.
    Overlap {
        /// The earlier hold.
        first: Hold,
        /// The later hold.
        second: Hold,
        /// How long both were held.
        overlap_ns: i64,
    },
    /// A grant's fence is not greater than that of the grant before it (in acquire order).
    FenceNotIncreasing {
        /// The earlier grant.
        previous: Hold,
        /// The grant whose fence is too low.
        hold: Hold,
    },
    /// A `use` outside its grant's hold (after its validity, loss or release), or with a
    /// token that was never granted.
    UseOutsideHold {
        /// The use.
        event: Event,
        /// Its grant, if any.
        hold: Option<Hold>,
    },
    /// A release with a token that was never granted, or released twice.
    ReleaseWithoutAcquire {
        /// The release.
        event: Event,
    },
}

impl Violation {
    /// A short name of the kind, for assertions and reports.
    pub fn kind(&self) -> &'static str {
        match self {
            Violation::Overlap { .. } => "overlap",
            Violation::FenceNotIncreasing { .. } => "fence",
            Violation::UseOutsideHold { .. } => "use-outside-hold",
            Violation::ReleaseWithoutAcquire { .. } => "release-without-acquire",
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Overlap {
                first,
                second,
                overlap_ns,
            } => write!(
                f,
                "overlap of {:.3} ms on {:?}: {} (fence {}) and {} (fence {})",
                *overlap_ns as f64 / 1e6,
                first.key,
                first.client,
                first.fence,
                second.client,
                second.fence
            ),
            Violation::FenceNotIncreasing { previous, hold } => write!(
                f,
                "fence on {:?} went from {} ({}) to {} ({})",
                hold.key, previous.fence, previous.client, hold.fence, hold.client
            ),
            Violation::UseOutsideHold { event, hold } => match hold {
                Some(h) => write!(
                    f,
                    "use by {} on {:?} {:.3} ms after its hold ended",
                    event.client,
                    event.key,
                    (event.t_ns - h.end_ns) as f64 / 1e6
                ),
                None => write!(
                    f,
                    "use by {} on {:?} with a token never granted",
                    event.client, event.key
                ),
            },
            Violation::ReleaseWithoutAcquire { event } => write!(
                f,
                "release by {} on {:?} without an acquire",
                event.client, event.key
            ),
        }
    }
}

/// What the checker found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Every grant, in acquire order.
    pub holds: Vec<Hold>,
    /// Every violation found.
    pub violations: Vec<Violation>,
}

impl Report {
    /// Whether the history is clean.
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty()
    }

    /// How many violations of this [`Violation::kind`].
    pub fn count(&self, kind: &str) -> usize {
        self.violations.iter().filter(|v| v.kind() == kind).count()
    }

    /// How many times consecutive grants of one key went to different clients.
    pub fn handovers(&self) -> usize {
        let mut by_key: BTreeMap<&str, Vec<&Hold>> = BTreeMap::new();
        for h in &self.holds {
            by_key.entry(&h.key).or_default().push(h);
        }
        by_key
            .values()
            .map(|hs| hs.windows(2).filter(|w| w[0].client != w[1].client).count())
            .sum()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} holds, {} violations",
            self.holds.len(),
            self.violations.len()
        )?;
        for v in self.violations.iter().take(20) {
            write!(f, "\n  {v}")?;
        }
        Ok(())
    }
}

/// Judges a history (the events of all clients, in any order).
pub fn check(events: &[Event]) -> Report {
    let mut events: Vec<&Event> = events.iter().collect();
    events.sort_by_key(|e| e.t_ns);
    let mut violations = Vec::new();

    // Build the holds: one per (key, token) acquire.
    let mut holds: Vec<Hold> = Vec::new();
    let mut index: HashMap<(&str, &str), usize> = HashMap::new();
    for e in &events {
        let id = (e.key.as_str(), e.token.as_str());
        match e.event {
            Kind::Acquire => {
                index.insert(id, holds.len());
                holds.push(Hold {
                    client: e.client.clone(),
                    key: e.key.clone(),
                    token: e.token.clone(),
                    fence: e.fence,
                    start_ns: e.t_ns,
                    end_ns: e.validity_ns,
                    validity_ns: e.validity_ns,
                    released_ns: None,
                    lost_ns: None,
                });
            }
            Kind::Renew | Kind::Use => {
                if let Some(&i) = index.get(&id) {
                    let h = &mut holds[i];
                    // The latest promise counts: a holder may shorten its own lease (an extend
                    // to a TTL shorter than what is left), and then believes it holds only
                    // until the shorter deadline. A promise made after the hold ended
                    // (released or lost) does not count.
                    if h.released_ns.is_none() && h.lost_ns.is_none() {
                        h.validity_ns = e.validity_ns;
                    }
                }
            }
            Kind::Lost => {
                if let Some(&i) = index.get(&id) {
                    let h = &mut holds[i];
                    // The validity the guard had when the loss was learnt was promised before
                    // it: it counts even when the renewal that made it was never reported.
                    if h.released_ns.is_none() && h.lost_ns.is_none() {
                        h.validity_ns = e.validity_ns;
                    }
                    h.lost_ns = Some(h.lost_ns.map_or(e.t_ns, |t| t.min(e.t_ns)));
                }
            }
            Kind::Release => match index.get(&id) {
                Some(&i) if holds[i].released_ns.is_none() && holds[i].client == e.client => {
                    holds[i].released_ns = Some(e.t_ns);
                }
                _ => violations.push(Violation::ReleaseWithoutAcquire {
                    event: (*e).clone(),
                }),
            },
        }
    }
    for h in &mut holds {
        h.end_ns = h
            .validity_ns
            .min(h.released_ns.unwrap_or(i64::MAX))
            .min(h.lost_ns.unwrap_or(i64::MAX));
    }

    // Uses: inside [start, end] of their own hold.
    for e in events.iter().filter(|e| e.event == Kind::Use) {
        let hold = index
            .get(&(e.key.as_str(), e.token.as_str()))
            .map(|&i| &holds[i]);
        let inside = hold
            .is_some_and(|h| h.client == e.client && e.t_ns >= h.start_ns && e.t_ns <= h.end_ns);
        if !inside {
            violations.push(Violation::UseOutsideHold {
                event: (*e).clone(),
                hold: hold.cloned(),
            });
        }
    }

    // Overlaps and fences, per key in acquire order.
    let mut by_key: BTreeMap<&str, Vec<&Hold>> = BTreeMap::new();
    for h in &holds {
        by_key.entry(&h.key).or_default().push(h);
    }
    for hs in by_key.values() {
        for (j, b) in hs.iter().enumerate() {
            for a in &hs[..j] {
                let overlap = a.end_ns.min(b.end_ns) - b.start_ns.max(a.start_ns);
                if overlap > 0 {
                    violations.push(Violation::Overlap {
                        first: (*a).clone(),
                        second: (*b).clone(),
                        overlap_ns: overlap,
                    });
                }
            }
        }
        // Fences of the holds that could be used: a grant whose validity ran out before its
        // acquire was written down (the client was stopped in between) was never a hold, and
        // its fence is older than its place in the history says.
        let usable: Vec<&Hold> = hs
            .iter()
            .copied()
            .filter(|h| h.end_ns > h.start_ns)
            .collect();
        for w in usable.windows(2) {
            if w[0].fence != 0 && w[1].fence != 0 && w[1].fence <= w[0].fence {
                violations.push(Violation::FenceNotIncreasing {
                    previous: w[0].clone(),
                    hold: w[1].clone(),
                });
            }
        }
    }
    Report { holds, violations }
}

/// The time of a client's last event (its crash, when it was killed).
pub fn last_event_ns(events: &[Event], client: &str) -> Option<i64> {
    events
        .iter()
        .filter(|e| e.client == client)
        .map(|e| e.t_ns)
        .max()
}

/// The time from `crash_ns` to the first acquire of `key` after it by a client other than
/// `crashed`.
pub fn recovery_ns(events: &[Event], key: &str, crashed: &str, crash_ns: i64) -> Option<i64> {
    events
        .iter()
        .filter(|e| {
            e.event == Kind::Acquire && e.key == key && e.client != crashed && e.t_ns > crash_ns
        })
        .map(|e| e.t_ns - crash_ns)
        .min()
}

/// The most spans (start, end) that overlap at any moment: what a counting lock (a semaphore
/// of N permits) must keep at N or less. At one instant an end counts before a start, so
/// spans that only touch do not overlap.
pub fn most_at_once(spans: &[(i64, i64)]) -> usize {
    let mut edges: Vec<(i64, i32)> = spans.iter().flat_map(|&(s, e)| [(s, 1), (e, -1)]).collect();
    edges.sort_unstable();
    let (mut inside, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        inside += d;
        most = most.max(inside);
    }
    most as usize
}

#[cfg(test)]
mod tests {
    #[test]
    fn most_at_once_counts_overlaps_and_not_touching_spans() {
        use super::most_at_once;
        assert_eq!(most_at_once(&[]), 0);
        assert_eq!(most_at_once(&[(0, 10), (10, 20), (20, 30)]), 1);
        assert_eq!(most_at_once(&[(0, 10), (5, 20), (6, 7), (19, 30)]), 3);
        assert_eq!(most_at_once(&[(0, 100), (1, 2), (3, 4), (5, 6)]), 2);
    }

    use super::*;

    const MS: i64 = 1_000_000;

    fn ev(client: &str, event: Kind, t_ms: i64, token: &str, fence: u64, v_ms: i64) -> Event {
        Event {
            client: client.into(),
            event,
            t_ns: t_ms * MS,
            key: "k".into(),
            token: token.into(),
            fence,
            validity_ns: v_ms * MS,
        }
    }

    /// a holds 0..10, b 12..30 (renewed), a again 31..40: clean.
    fn clean() -> Vec<Event> {
        vec![
            ev("a", Kind::Acquire, 0, "a1", 1, 100),
            ev("a", Kind::Use, 5, "a1", 1, 100),
            ev("a", Kind::Release, 10, "a1", 1, 100),
            ev("b", Kind::Acquire, 12, "b1", 2, 20),
            ev("b", Kind::Renew, 18, "b1", 2, 50),
            ev("b", Kind::Use, 25, "b1", 2, 50),
            ev("b", Kind::Release, 30, "b1", 2, 50),
            ev("a", Kind::Acquire, 31, "a2", 3, 130),
            ev("a", Kind::Use, 32, "a2", 3, 130),
            ev("a", Kind::Release, 40, "a2", 3, 130),
        ]
    }

    /// A holder stopped right after a renewal it never reported: its `lost` event carries the
    /// validity that renewal promised, and a second holder inside it is an overlap.
    #[test]
    fn the_validity_a_lost_event_carries_counts() {
        let events = vec![
            ev("a", Kind::Acquire, 0, "a1", 1, 100),
            ev("b", Kind::Acquire, 120, "b1", 2, 300),
            ev("b", Kind::Release, 140, "b1", 2, 300),
            ev("a", Kind::Lost, 200, "a1", 1, 150),
        ];
        let r = check(&events);
        assert_eq!(r.count("overlap"), 1, "{r}");
        assert_eq!(r.holds[0].end_ns, 150 * MS);
        // Without the renewal (the lost event promises no more than the acquire): clean.
        let mut events = events;
        events[3].validity_ns = 100 * MS;
        assert!(check(&events).is_clean());
    }

    /// A holder that shortened its own lease (an extend to a short TTL) holds until the
    /// shorter deadline: a next holder after it is no overlap, although an earlier renewal
    /// had promised more.
    #[test]
    fn a_lease_shortened_by_its_holder_ends_at_the_shorter_deadline() {
        let mut events = vec![
            ev("a", Kind::Acquire, 0, "a1", 1, 100),
            ev("a", Kind::Renew, 50, "a1", 1, 300),
            ev("a", Kind::Renew, 120, "a1", 1, 150),
            ev("b", Kind::Acquire, 155, "b1", 2, 400),
            ev("a", Kind::Lost, 160, "a1", 1, 150),
            ev("b", Kind::Release, 170, "b1", 2, 400),
        ];
        assert!(check(&events).is_clean(), "{}", check(&events));
        assert_eq!(check(&events).holds[0].end_ns, 150 * MS);
        // Without the shortening, b's grant is inside a's lease.
        events.remove(2);
        events[3].validity_ns = 300 * MS;
        assert_eq!(check(&events).count("overlap"), 1, "{}", check(&events));
    }

    /// A client stopped between its grant and writing it down: by the time its acquire is
    /// written the validity is over, and the next holder's fence is already higher. Not a
    /// violation; the same late acquire with validity left is.
    #[test]
    fn a_grant_written_down_after_its_validity_has_no_fence_order() {
        let mut events = vec![
            ev("b", Kind::Acquire, 50, "b1", 6, 300),
            ev("b", Kind::Release, 60, "b1", 6, 300),
            ev("a", Kind::Acquire, 70, "a1", 5, 40),
            ev("a", Kind::Lost, 71, "a1", 5, 40),
        ];
        assert!(check(&events).is_clean(), "{}", check(&events));
        events[2].validity_ns = 100 * MS;
        events[3].validity_ns = 100 * MS;
        assert_eq!(check(&events).count("fence"), 1, "{}", check(&events));
    }

    #[test]
    fn json_round_trip_with_escapes() {
        let mut e = ev("c\"li\\ent\n\u{1}é", Kind::Renew, 7, "tok", 9, -3);
        e.key = "{k}:lock\t".into();
        let line = e.to_json();
        assert!(!line.contains('\n'));
        assert_eq!(Event::parse(&line).unwrap(), e);
        let spaced = r#" { "event" : "use", "client":"x\u00e9\ud83d\ude00", "t_ns": 1, "key":"k",
            "token":"t","fence":0,"validity_ns":2 } "#;
        let p = Event::parse(spaced).unwrap();
        assert_eq!(p.client, "xé😀");
        assert_eq!(p.event, Kind::Use);
        assert!(Event::parse(r#"{"client":"a"}"#).is_err());
        assert!(Event::parse(r#"{"client":"a","event":"nap","t_ns":1,"key":"k","token":"t","fence":0,"validity_ns":2}"#).is_err());
    }

    #[test]
    fn a_clean_history_passes() {
        let r = check(&clean());
        assert!(r.is_clean(), "{r}");
        assert_eq!(r.holds.len(), 3);
        assert_eq!(r.holds[1].end_ns, 30 * MS);
        assert_eq!(r.handovers(), 2);
    }

    #[test]
    fn overlap_is_detected_and_clipped_at_validity() {
        let mut h = clean();
        // b acquires while a still holds a2 (31..40).
        h.push(ev("b", Kind::Acquire, 35, "b2", 4, 200));
        let r = check(&h);
        assert_eq!(r.count("overlap"), 1, "{r}");
        // A hold whose validity ran out does not overlap a later one: a crashed holder.
        let h = vec![
            ev("a", Kind::Acquire, 0, "a1", 1, 10),
            ev("b", Kind::Acquire, 11, "b1", 2, 100),
        ];
        assert!(check(&h).is_clean());
        // A reported loss ends the hold too.
        let h = vec![
            ev("a", Kind::Acquire, 0, "a1", 1, 100),
            ev("a", Kind::Lost, 20, "a1", 1, 100),
            ev("b", Kind::Acquire, 21, "b1", 2, 100),
        ];
        assert!(check(&h).is_clean());
    }

    #[test]
    fn non_increasing_fences_are_detected() {
        let mut h = clean();
        h[7].fence = 2;
        let r = check(&h);
        assert_eq!(r.count("fence"), 1, "{r}");
        assert_eq!(r.violations.len(), 1);
    }

    #[test]
    fn uses_outside_a_hold_are_detected() {
        // After its validity.
        let mut h = clean();
        h.push(ev("b", Kind::Use, 60, "b1", 2, 50));
        // After its release (still within validity).
        h.push(ev("a", Kind::Use, 41, "a2", 3, 130));
        // With a token never granted.
        h.push(ev("c", Kind::Use, 42, "c9", 0, 130));
        let r = check(&h);
        assert_eq!(r.count("use-outside-hold"), 3, "{r}");
        // After a reported loss.
        let h = vec![
            ev("a", Kind::Acquire, 0, "a1", 1, 100),
            ev("a", Kind::Lost, 20, "a1", 1, 100),
            ev("a", Kind::Use, 21, "a1", 1, 100),
        ];
        assert_eq!(check(&h).count("use-outside-hold"), 1);
    }

    #[test]
    fn releases_without_acquire_are_detected() {
        let mut h = clean();
        h.push(ev("c", Kind::Release, 41, "zz", 0, 0));
        h.push(ev("a", Kind::Release, 42, "a2", 3, 130)); // twice
        let r = check(&h);
        assert_eq!(r.count("release-without-acquire"), 2, "{r}");
    }

    #[test]
    fn recovery_after_a_crash() {
        let h = vec![
            ev("a", Kind::Acquire, 0, "a1", 1, 100),
            ev("a", Kind::Use, 5, "a1", 1, 100),
            ev("b", Kind::Acquire, 101, "b1", 2, 300),
            ev("c", Kind::Acquire, 400, "c1", 3, 500),
        ];
        assert_eq!(last_event_ns(&h, "a"), Some(5 * MS));
        assert_eq!(recovery_ns(&h, "k", "a", 5 * MS), Some(96 * MS));
        assert_eq!(recovery_ns(&h, "k", "a", 500 * MS), None);
        assert!(check(&h).is_clean());
    }

    #[test]
    fn torn_last_lines_are_skipped() {
        let dir = crate::TempDir::new("redmutex-history");
        let path = dir.path().join("h.jsonl");
        let good = ev("a", Kind::Acquire, 0, "a1", 1, 100).to_json();
        std::fs::write(&path, format!("{good}\n{{\"client\":\"a\",\"ev")).unwrap();
        assert_eq!(read_histories(&[&path]).unwrap().len(), 1);
        std::fs::write(&path, format!("{{\"x\n{good}\n")).unwrap();
        assert!(read_histories(&[&path]).is_err());
    }
}
