//! Routing decision micro-benches (work in progress).
fn main() {}
