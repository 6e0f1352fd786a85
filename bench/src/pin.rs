//! Where the bench's processes run: the redis-servers on the machine's last CPU, the clients
//! (this process and every child it starts, which inherit it) on the others. Client and
//! server then never share a CPU, as on a real fleet, and every round trip crosses CPUs the
//! same way. Left to the scheduler, a process whose server happened to run on its own CPU
//! answered round trips several times faster than one whose server did not, for seconds at a
//! time (a PING of 24 µs in one run, 52 µs in the next), and rows measured in different
//! processes did not compare: a peer's child once ran its whole 1-node row at 22.7 µs a cycle
//! while this process's PING took 52 µs.

use std::mem::MaybeUninit;
use std::sync::OnceLock;

/// How the CPUs are shared.
#[derive(Debug)]
pub struct Cpus {
    /// The machine's online CPUs.
    pub machine: usize,
    /// The CPUs the clients run on, the servers having the one left: `None` when not pinned
    /// (all processes share all CPUs).
    pub clients: Option<usize>,
    /// The above in words, for the report.
    pub placement: String,
}

static CPUS: OnceLock<Cpus> = OnceLock::new();

/// The machine's online CPUs, whatever this process is pinned to.
fn machine() -> usize {
    // SAFETY: sysconf only reads a system setting.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(1).max(1)
}

/// How the CPUs are shared in this run (as [`split`] left them).
pub fn current() -> &'static Cpus {
    CPUS.get_or_init(|| Cpus {
        machine: machine(),
        clients: None,
        placement: "not pinned".to_owned(),
    })
}

/// Pins `servers` (pids) to the last CPU and this process to the others; with one CPU, or
/// when the system refuses, nothing is pinned. Returns how the CPUs are shared.
pub fn split(servers: &[u32]) -> &'static Cpus {
    let machine = machine();
    let pinned = match machine {
        1 => Err("one CPU".to_owned()),
        n => servers
            .iter()
            .try_for_each(|&pid| set(pid as libc::pid_t, n - 1..n))
            .and_then(|()| set(0, 0..n - 1)),
    };
    let cpus = match pinned {
        Ok(()) => Cpus {
            machine,
            clients: Some(machine - 1),
            placement: format!(
                "redis-servers pinned to CPU {}, clients to {}",
                machine - 1,
                match machine {
                    2 => "CPU 0".to_owned(),
                    n => format!("CPUs 0–{}", n - 2),
                }
            ),
        },
        Err(why) => Cpus {
            machine,
            clients: None,
            placement: format!("not pinned ({why})"),
        },
    };
    let _ = CPUS.set(cpus);
    current()
}

fn set(pid: libc::pid_t, cpus: std::ops::Range<usize>) -> Result<(), String> {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes within it for CPUs below
    // CPU_SETSIZE; sched_setaffinity only reads it.
    let set = unsafe {
        let mut set = MaybeUninit::<libc::cpu_set_t>::zeroed().assume_init();
        for cpu in cpus {
            libc::CPU_SET(cpu, &mut set);
        }
        set
    };
    // SAFETY: `set` is a valid cpu_set_t of the size given.
    let rc = unsafe { libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(format!(
            "sched_setaffinity: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}
