//! The message properties string (docs/protocol/WIRE.md §9.1).
//!
//! Input: arbitrary bytes taken as a properties string. Decoding never panics; `get` agrees
//! with iteration (last value wins); the entries that pass `check_entry` re-encode (both
//! trailing-separator styles) to a string that decodes to exactly those entries; encoding into
//! too-small buffers (`rmq_fuzz::too_small_sizes`) fail cleanly; `Properties<N>` accepts them until full.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rmq_core::message::properties::{
    EncodeProperties, Properties, PropertiesEncoder, PropertiesError, PropertiesRef,
    TrailingSeparator, check_entry,
};

fuzz_target!(|data: &[u8]| {
    let Ok(props) = PropertiesRef::from_bytes(data) else {
        assert!(core::str::from_utf8(data).is_err());
        return;
    };
    let entries: Vec<(&str, &str)> = props.iter().collect();
    assert_eq!(props.is_empty(), entries.is_empty());
    let mut last = std::collections::HashMap::new();
    for (k, v) in &entries {
        assert!(!k.is_empty() && !v.is_empty());
        assert!(!k.contains(['\u{1}', '\u{2}']));
        assert!(!v.contains('\u{2}'));
        last.insert(*k, *v);
    }
    // `get` is a linear scan: check it on the first and last 8 entries only, so one input
    // stays linear in its length.
    let n = entries.len();
    for (i, (k, _)) in entries.iter().enumerate() {
        if i < 8 || i + 8 >= n {
            assert_eq!(props.get(k), last.get(k).copied());
            assert!(props.contains_key(k));
        }
    }
    let valid: Vec<(&str, &str)> = entries
        .iter()
        .copied()
        .filter(|(k, v)| check_entry(k, v).is_ok())
        .collect();
    for trailing in [TrailingSeparator::Write, TrailingSeparator::Omit] {
        let enc = PropertiesEncoder::new(valid.iter().copied()).trailing_separator(trailing);
        let len = enc.encoded_len();
        let mut buf = vec![0u8; len];
        for n in rmq_fuzz::too_small_sizes(len, rmq_fuzz::salt(data)) {
            assert_eq!(
                enc.encode(&mut buf[..n]),
                Err(PropertiesError::BufferTooSmall)
            );
        }
        assert_eq!(enc.encode(&mut buf), Ok(len));
        let back = PropertiesRef::from_bytes(&buf).expect("encoded properties are UTF-8");
        assert_eq!(
            back.iter().collect::<Vec<_>>(),
            valid,
            "re-encoded properties differ"
        );
    }
    // Encoding the raw decoded view validates like the encoder does.
    let mut all = vec![0u8; props.encoded_len()];
    let _ = props.encode(&mut all);

    let mut map: Properties<'_, 8> = Properties::default();
    for (k, v) in &valid {
        let had = map.contains_key(k);
        let full = map.len() == 8;
        match map.insert(k, v) {
            Ok(_) => assert_eq!(map.get(k), Some(*v)),
            Err(_) => assert!(full && !had, "insert failed with room to spare"),
        }
    }
    assert!(map.len() <= 8);
    let collected: Vec<_> = map.iter().collect();
    assert_eq!(collected.len(), map.len());
    if let Some((k, _)) = collected.first() {
        assert!(map.remove(k).is_some());
        assert!(!map.contains_key(k));
    }
});
