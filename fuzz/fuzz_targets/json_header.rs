//! Arbitrary bytes as a JSON (serialize type 0) header: decoding never panics, and every ext
//! field supports all `FieldStr` operations consistently.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rmq_core::wire::SerializeType;

fuzz_target!(|data: &[u8]| {
    rmq_fuzz::parse_both_ways(SerializeType::JSON, data);
});
