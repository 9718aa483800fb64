//! Replays the committed fuzz corpora (`fuzz/corpus/*`) through the fuzz oracles on stable.
//!
//! No libFuzzer: each file is one ordinary input, run under `catch_unwind` so a panic names
//! the file and the other files still run. Files named `valid-…` must also be accepted, so a
//! reader that turns strict cannot pass by rejecting everything; `crash-…` files are inputs
//! that once failed and must keep passing.

#[path = "../../fuzz/src/lib.rs"]
mod oracles;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// Runs every file of `fuzz/corpus/<target>` through `oracle`; fails listing every bad file.
fn replay(target: &str, oracle: fn(&[u8]) -> bool) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(
        files.len() >= 20,
        "{}: only {} seeds",
        dir.display(),
        files.len()
    );

    let mut failures = Vec::new();
    let mut valid = 0;
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let data = std::fs::read(path).unwrap();
        match catch_unwind(AssertUnwindSafe(|| oracle(&data))) {
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failures.push(format!("{target}/{name}: panicked: {msg}"));
            }
            Ok(accepted) => {
                if name.starts_with("valid-") {
                    valid += 1;
                    if !accepted {
                        failures.push(format!("{target}/{name}: valid seed rejected"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(valid >= 5, "{target}: only {valid} `valid-` seeds");
}

#[test]
fn envelope_corpus() {
    replay("envelope", oracles::envelope);
}

#[test]
fn card_corpus() {
    replay("card", oracles::card);
}

#[test]
fn policy_corpus() {
    replay("policy", oracles::policy);
}

#[test]
fn llmx_corpus() {
    replay("llmx", oracles::llmx);
}

#[test]
fn ladp_corpus() {
    replay("ladp", oracles::ladp);
}

#[test]
fn llmcp_corpus() {
    replay("llmcp", oracles::llmcp);
}

#[test]
fn a2a_corpus() {
    replay("a2a", oracles::a2a);
}
