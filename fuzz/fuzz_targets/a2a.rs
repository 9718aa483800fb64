//! libFuzzer target: arbitrary bytes through the A2A oracle in `src/lib.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ldp_gateway_fuzz::a2a(data);
});
