//! The header fast paths (fastjson layout, compact scanner, flat ext scanner) against the
//! full parser, and the parse-time sinks against `ext_iter`.

use super::json::{HEADER_KEYS, Key, json_key, json_key_by_table};
use super::*;
use crate::json::{FlatValue, JsonStr, Parser};
use crate::wire::{FieldStr, SerializeType};
use std::vec::Vec;

/// Reference ext iteration with the full parser ([`crate::json::ParsedScan`], the
/// scanner of 32-bit targets; what `ExtIter` did before `FlatScan`).
fn ext_by_parser(bytes: &[u8]) -> Vec<(FieldStr<'_>, FieldStr<'_>)> {
    let mut out = Vec::new();
    let mut scan = crate::json::ParsedScan::new(bytes);
    while let Some((k, v)) = scan.next_pair() {
        let v = match v {
            FlatValue::Str(s) => FieldStr::json(s),
            FlatValue::Literal(raw) => FieldStr::json_literal(raw),
            FlatValue::Null => continue,
        };
        out.push((FieldStr::json(k), v));
    }
    out
}

/// The compact fast path must agree with the full parser whenever it accepts, and the
/// flat ext scanner must yield what the parser yields.
/// Records what a parse hands to its sink.
#[derive(Default)]
struct Rec<'a>(Vec<(FieldStr<'a>, FieldStr<'a>)>);

impl<'a> ExtSink<'a> for Rec<'a> {
    fn field(&mut self, k: FieldStr<'a>, v: FieldStr<'a>) {
        self.0.push((k, v));
    }
    fn reset(&mut self) {
        self.0.clear();
    }
}

/// A one-pass parse gives the same header as a plain one, and its sink sees exactly
/// the fields `ext_iter` yields afterwards.
fn check_sink(ty: SerializeType, input: &[u8]) {
    let mut rec = Rec::default();
    let r = CommandHeader::parse_bytes_into(ty, input, &mut rec);
    assert_eq!(r, CommandHeader::parse_bytes(ty, input));
    if let Ok(h) = r {
        assert_eq!(rec.0, h.ext_iter().collect::<Vec<_>>(), "{input:?}");
    }
}

fn check(input: &[u8]) {
    check_sink(SerializeType::JSON, input);
    let full = CommandHeader::parse_json_full(input);
    if let Some(fast) = CommandHeader::parse_json_compact(input, &mut ()) {
        assert_eq!(Ok(fast), full, "{:?}", core::str::from_utf8(input));
    }
    let mut rec = Rec::default();
    if let Some(fj) = CommandHeader::parse_json_fastjson(input, &mut rec) {
        assert_eq!(Ok(fj), full, "{:?}", core::str::from_utf8(input));
        assert_eq!(rec.0, fj.ext_iter().collect::<Vec<_>>());
    }
    if let Ok(h) = CommandHeader::parse_json(input) {
        assert_eq!(Ok(h), full);
        if let Some(e) = h.ext_fields() {
            let fast: Vec<_> = e.iter().collect();
            assert_eq!(
                fast,
                ext_by_parser(e.raw()),
                "{:?}",
                core::str::from_utf8(input)
            );
        }
    }
}

#[test]
fn header_keys_by_match_and_by_table() {
    let others = [
        ("serializeTypeCurrentRPC", Key::Other),
        ("cod", Key::Other),
        ("codes", Key::Other),
        ("Code", Key::Other),
        ("", Key::Other),
    ];
    for (text, want) in HEADER_KEYS.into_iter().chain(others) {
        let plain = JsonStr::from_raw(text.as_bytes());
        assert_eq!(json_key(plain), want, "{text}");
        assert_eq!(json_key_by_table(plain), want, "{text}");
    }
    let escaped = Parser::new(br#""\u0063ode""#).string().unwrap();
    assert!(escaped.has_escapes());
    assert_eq!(json_key(escaped), Key::Code);
    assert_eq!(json_key_by_table(escaped), Key::Code);
}

#[test]
fn fast_path_examples() {
    let cases: &[&str] = &[
        r#"{"code":10,"opaque":1}"#,
        r#"{"code":"10","opaque":"1","flag":null,"version":-3}"#,
        r#"{"opaque":1,"extFields":{"a":"x\u0001y","b":1,"c":true,"d":null,"e\"f":"g\\"}}"#,
        r#"{"opaque":1,"extFields":{},"remark":"r\n","language":"JAVA"}"#,
        r#"{"opaque":1,"extFields":{"a":1,},"x":2,}"#,
        r#"{ "opaque" : 1 , "extFields" : { 'a' : 'b' , c : 1.5e3 , "d" : false } }"#,
        r#"{"opaque":1,"extFields":{"a":[1]}}"#,
        r#"{"opaque":1,"code":1.5}"#,
        r#"{"opaque":1,"extFields":null,"other":{"x":[1,2]}}"#,
        r#"{"opaque":1} "#,
        r#"{"opaque":1}x"#,
        r#"{"opaque":1,"language":7,"remark":null}"#,
        r#"{"opaque":null}"#,
        r#"{"opaque":1,"extFields":{"a":"\x"}}"#,
        r#"{"opaque":1,"extFields":{"a":"\u12"}}"#,
    ];
    for c in cases {
        check(c.as_bytes());
    }
    // The layout path takes what Java (and our encoder) writes.
    let java = br#"{"code":310,"extFields":{"a":"pg","i":"K\u0001V"},"flag":0,"language":"JAVA","opaque":7,"serializeTypeCurrentRPC":"JSON","version":479}"#;
    assert!(CommandHeader::parse_json_fastjson(java, &mut ()).is_some());
    check(java);
    // The fast path does take the common compact form.
    let ok = br#"{"code":310,"extFields":{"a":"pg","i":"K\u0001V"},"flag":0,"opaque":7}"#;
    assert!(CommandHeader::parse_json_compact(ok, &mut ()).is_some());
    // A repeated extFields replaces the earlier one, for the sink too.
    check(br#"{"opaque":1,"extFields":{"a":"x"},"extFields":{"b":"y"}}"#);
    check(br#"{"opaque":1,"extFields":{"a":"x"},"extFields":null}"#);
    check(br#"{"opaque":1,"extFields":{"a":"x"}, "extFields":{"b":"y"}}"#);
    // ... and leaves anything with whitespace to the full parser.
    assert!(CommandHeader::parse_json_compact(br#"{"opaque": 7}"#, &mut ()).is_none());
    assert_eq!(
        CommandHeader::parse_json(br#"{"opaque": 7}"#).map(|h| h.opaque()),
        Ok(7)
    );
}

const PIECES: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ":",
    ",",
    " ",
    "\"code\"",
    "\"opaque\"",
    "\"extFields\"",
    "\"flag\"",
    "\"language\"",
    "\"remark\"",
    "\"version\"",
    "\"a\"",
    "'b'",
    "c",
    "1",
    "-2",
    "1.5",
    "2e3",
    "-",
    "\"x\\u0001y\"",
    "\"\\\"\"",
    "\"\\q\"",
    "\"\\u12\"",
    "\"",
    "null",
    "true",
    "false",
    "nul",
    "\"JAVA\"",
    "\"7\"",
    "\\",
];

proptest::proptest! {
    #[test]
    fn binary_sink_agrees_with_iter(
        entries in proptest::collection::vec(
            (proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4),
             proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4)),
            0..6),
        cut in 0usize..64,
    ) {
        let mut ext = Vec::new();
        for (k, v) in &entries {
            ext.extend_from_slice(&(k.len() as i16).to_be_bytes());
            ext.extend_from_slice(k);
            ext.extend_from_slice(&(v.len() as i32).to_be_bytes());
            ext.extend_from_slice(v);
        }
        let mut h = std::vec![0, 10, 0, 1, 223, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0];
        h.extend_from_slice(&(ext.len() as i32).to_be_bytes());
        h.extend_from_slice(&ext);
        check_sink(SerializeType::ROCKETMQ, &h);
        // And truncated anywhere (errors must agree too).
        h.truncate(h.len().saturating_sub(cut));
        check_sink(SerializeType::ROCKETMQ, &h);
    }

    /// Headers in (or one byte away from) the fastjson layout: the layout path, the
    /// compact scanner and the full parser agree.
    #[test]
    fn fastjson_layout_agrees_with_parser(
        parts in (
            (0..6usize, 0..6usize, 0..4usize, 0..4usize),
            (0..3usize, 0..3usize, 0..3usize, 0..3usize),
        ),
        edit in proptest::option::of((0usize..400, proptest::prelude::any::<u8>(), proptest::prelude::any::<bool>())),
    ) {
        const NUM: &[&str] = &["310", "-1", "\"10\"", "1.5", "null", "x"];
        const EXT: &[&str] = &[
            "",
            r#","extFields":null"#,
            r#","extFields":{}"#,
            r#","extFields":{"a":"x\u0001y","b":1,"c":true,"d":null,"e\"f":"g\\"}"#,
            r#","extFields":[1]"#,
            r#","extFields":{"a":"1","a":"2"},"extFields":{"b":"3"}"#,
        ];
        const LANG: &[&str] = &["\"JAVA\"", "7", "null", "\"GO\""];
        const OPQ: &[&str] = &["7", "null", "\"8\"", "-2147483648"];
        const REMARK: &[&str] = &["", r#","remark":"r\n""#, r#","remark":null"#];
        const SER: &[&str] = &["\"JSON\"", "1", "{}"];
        const VER: &[&str] = &["479", "-3", "\"1\""];
        let ((code, ext, flag, lang), (opq, remark, ser, ver)) = parts;
        let s = std::format!(
            r#"{{"code":{}{},"flag":{},"language":{},"opaque":{}{},"serializeTypeCurrentRPC":{},"version":{}}}"#,
            NUM[code], EXT[ext], NUM[flag % 3], LANG[lang], OPQ[opq], REMARK[remark], SER[ser], VER[ver],
        );
        let mut b = s.into_bytes();
        check(&b);
        if let Some((at, byte, insert)) = edit {
            let at = at % (b.len() + 1);
            if insert {
                b.insert(at, byte);
            } else if at < b.len() {
                b[at] = byte;
            }
            check(&b);
        }
    }

    #[test]
    fn fast_path_agrees_with_parser(ix in proptest::collection::vec(0..PIECES.len(), 0..40)) {
        let mut s = std::string::String::new();
        for i in ix {
            s.push_str(PIECES[i]);
        }
        check(s.as_bytes());
    }

    #[test]
    fn fast_path_agrees_on_shaped_input(
        pairs in proptest::collection::vec((0..PIECES.len(), 0..PIECES.len()), 0..12),
        ext in proptest::collection::vec((0..PIECES.len(), 0..PIECES.len()), 0..8),
    ) {
        // Mostly well-formed objects, so the accepting paths get exercised.
        let mut s = std::string::String::from("{\"opaque\":1,\"extFields\":{");
        for (n, (k, v)) in ext.iter().enumerate() {
            if n > 0 {
                s.push(',');
            }
            s.push_str(PIECES[*k]);
            s.push(':');
            s.push_str(PIECES[*v]);
        }
        s.push('}');
        for (k, v) in pairs {
            s.push(',');
            s.push_str(PIECES[k]);
            s.push(':');
            s.push_str(PIECES[v]);
        }
        s.push('}');
        check(s.as_bytes());
    }
}
