//! Arbitrary bytes as a ROCKETMQ (serialize type 1) binary header: decoding never panics, and
//! every ext field supports all `FieldStr` operations consistently.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rmq_core::wire::SerializeType;

fuzz_target!(|data: &[u8]| {
    rmq_fuzz::parse_both_ways(SerializeType::ROCKETMQ, data);
});
