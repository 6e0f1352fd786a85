//! A tiny scratch-directory helper (no `tempfile` dependency).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Per-process counter that makes every [`TempDir`] name unique within the process.
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A scratch directory under [`std::env::temp_dir()`], removed (recursively) on drop.
///
/// The name is `<prefix>-<pid>-<counter>`, unique per process and per call. If a directory
/// with that name is left over from an earlier process that had the same pid, the counter is
/// advanced until an unused name is found, so a stale directory is never reused.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Create a fresh, empty scratch directory whose name starts with `prefix`.
    ///
    /// Panics if the directory cannot be created (a test-support helper has no better option).
    pub fn new(prefix: &str) -> TempDir {
        let base = std::env::temp_dir();
        let pid = std::process::id();
        loop {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = base.join(format!("{prefix}-{pid}-{n}"));
            match std::fs::create_dir(&path) {
                Ok(()) => return TempDir { path },
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => panic!("cannot create temp dir {}: {e}", path.display()),
            }
        }
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // Best effort: never panic in drop.
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
