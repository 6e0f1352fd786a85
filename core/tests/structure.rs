//! The crate's structure, held to what its docs say: the "Architecture" table of the crate
//! docs names every file of `src/`; a `mod.rs` only declares modules and re-exports; and the
//! protocol's machines (`src/lock/proto/`) do no I/O of their own: they import neither the
//! transport nor a blocking driver, and read no clock, draw no random number and sleep not.

use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`, as a path relative to `src/` with `/` separators.
fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(src()).unwrap();
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    out.sort();
    out
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(src().join(rel)).unwrap()
}

/// The code of a file before its test module, without comments.
fn code(rel: &str) -> Vec<String> {
    read(rel)
        .lines()
        .take_while(|l| !l.starts_with("#[cfg(test)]"))
        .map(|l| l.split("//").next().unwrap_or("").trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn the_architecture_table_names_every_file_and_no_other() {
    let lib = read("lib.rs");
    let start = lib
        .find("//! # Architecture")
        .expect("an Architecture section");
    let table = &lib[start..];
    // Up to the next section.
    let end = ["\n//! ## ", "\n//! # ", "\n#!["]
        .iter()
        .filter_map(|m| table[1..].find(m).map(|i| i + 1))
        .min()
        .unwrap_or(table.len());
    let table = &table[..end];
    let tree = files(&src());
    let missing: Vec<&String> = tree
        .iter()
        .filter(|f| !table.contains(&format!("`{f}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "files of src/ the Architecture table does not name: {missing:?}"
    );
    // Every `….rs` the table names exists.
    let named: Vec<&str> = table
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| w.ends_with(".rs") && !w.contains(' '))
        .collect();
    let gone: Vec<&&str> = named
        .iter()
        .filter(|w| !tree.iter().any(|f| f == **w))
        .collect();
    assert!(
        gone.is_empty(),
        "the table names files that are not there: {gone:?}"
    );
}

#[test]
fn a_mod_rs_only_declares_and_re_exports() {
    for f in files(&src()).iter().filter(|f| f.ends_with("mod.rs")) {
        for line in code(f) {
            let allowed = line.starts_with("mod ")
                || line.starts_with("pub mod ")
                || line.starts_with("pub(crate) mod ")
                || line.starts_with("pub use ")
                || line.starts_with("pub(crate) use ")
                || line.starts_with("use ")
                || line.starts_with("#[")
                || line.starts_with("//!")
                || line.starts_with('}')
                // a `use` list that goes on over several lines
                || line.ends_with(',')
                || line.ends_with("};");
            assert!(allowed, "{f} holds more than declarations: {line:?}");
        }
    }
}

/// What a file under `lock/proto/` must not mention: the transport, the blocking drivers, a
/// clock, a random source, a sleep.
const NOT_IN_PROTO: &[&str] = &[
    "crate::net",
    "lock::acquire",
    "lock::wait",
    "lock::lease",
    "lock::release",
    "lock::renew",
    "lock::cleanup",
    "lock::voters",
    "lock::token",
    "Instant::now",
    "SystemTime",
    "getrandom",
    "thread::sleep",
    "clock::Clock",
    "clock::Boottime",
];

#[test]
fn the_protocol_machines_do_no_io() {
    // Test modules (`tests.rs`, and what follows `#[cfg(test)]`) may use anything.
    for f in files(&src().join("lock/proto"))
        .into_iter()
        .filter(|f| !f.ends_with("/tests.rs"))
    {
        for line in code(&f) {
            if let Some(bad) = NOT_IN_PROTO.iter().find(|b| line.contains(*b)) {
                panic!("{f} uses {bad}: {line:?}");
            }
        }
    }
}
