//! libFuzzer target: arbitrary bytes through the card oracle in `src/lib.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ldp_gateway_fuzz::card(data);
});
