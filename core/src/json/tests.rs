//! Unit and property tests of the JSON parser, scanners and writer.

use super::bytes::find2;
use super::*;
use std::string::String;
use std::vec::Vec;

fn tokens(s: &str) -> core::result::Result<Vec<Token<'_>>, JsonError> {
    let mut p = Parser::new(s.as_bytes());
    let mut v = Vec::new();
    while let Some(t) = p.next_token()? {
        v.push(t);
    }
    Ok(v)
}

#[test]
fn tokenizes_nested() {
    let t = tokens(r#" {"a":[1,-2.5e3,true,false,null,"x"],"b":{}} "#).unwrap();
    assert_eq!(t.len(), 14);
    assert_eq!(t[0], Token::ObjectStart);
    assert!(matches!(t[1], Token::Key(k) if k.eq_str("a")));
    assert!(matches!(t[4], Token::Number(n) if n.raw() == b"-2.5e3"));
    assert_eq!(t[13], Token::ObjectEnd);
}

#[test]
fn bare_and_single_quoted_keys() {
    let mut p = Parser::new(b"{0:'a',-1:\"b\",name:'it\\'s',}");
    p.expect_object_start().unwrap();
    let k = p.next_key().unwrap().unwrap();
    assert_eq!(k.parse_i64(), Some(0));
    assert!(p.string().unwrap().eq_str("a"));
    let k = p.next_key().unwrap().unwrap();
    assert_eq!(k.parse_i64(), Some(-1));
    assert!(p.string().unwrap().eq_str("b"));
    let k = p.next_key().unwrap().unwrap();
    assert!(k.eq_str("name"));
    assert!(p.string().unwrap().eq_str("it's"));
    assert_eq!(p.next_key().unwrap(), None);
    p.finish().unwrap();
}

#[test]
fn errors() {
    for bad in [
        "",
        "{",
        "[1,",
        "{\"a\"}",
        "{\"a\":}",
        "[1 2]",
        "\"\\x\"",
        "\"\\u12\"",
        "-",
        "1.",
        "1e",
        "tru",
        "{}x",
        "[}",
        "{]",
        "{-:1}",
    ] {
        assert!(tokens(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn depth_limit() {
    let ok: String = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
    tokens(&ok).unwrap();
    let bad: String = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
    assert_eq!(tokens(&bad).unwrap_err().kind, JsonErrorKind::TooDeep);
    let huge = "[".repeat(100_000);
    assert_eq!(tokens(&huge).unwrap_err().kind, JsonErrorKind::TooDeep);
}

#[test]
fn unescape_and_compare() {
    let mut p = Parser::new(br#""a\u0001b\n\"\\\/\ud83d\ude00\u00e9""#);
    let s = p.string().unwrap();
    assert!(s.has_escapes());
    assert_eq!(s.as_str(), None);
    let want = "a\u{1}b\n\"\\/\u{1F600}\u{e9}";
    assert!(s.eq_str(want));
    assert!(!s.eq_str("a\u{1}b"));
    assert!(!s.eq_str(&(String::from(want) + "x")));
    assert_eq!(s.unescaped_len().unwrap(), want.len());
    let mut buf = [0u8; 64];
    assert_eq!(s.unescape_into(&mut buf).unwrap(), want);
    let mut small = [0u8; 5];
    assert_eq!(
        s.unescape_into(&mut small).unwrap_err().kind,
        JsonErrorKind::BufferTooSmall
    );
    assert_eq!(s.chars().collect::<String>(), want);
    let lone = Parser::new(br#""\ud83d x""#).string().unwrap();
    assert_eq!(
        lone.unescape_into(&mut buf).unwrap_err().kind,
        JsonErrorKind::LoneSurrogate
    );
    assert!(!lone.eq_str("\u{fffd} x"));
}

#[test]
fn find2_matches_naive() {
    let hay = b"abcdefgh\\ijklmnopq\"rstuvwxyz0123456789\x80\xff";
    for start in 0..hay.len() {
        for (a, b) in [(b'"', b'\\'), (b'z', b'q'), (0x80, 0xff), (b'!', b'#')] {
            let h = &hay[start..];
            let naive = h.iter().position(|&x| x == a || x == b);
            assert_eq!(find2(h, a, b), naive, "{start} {a} {b}");
        }
    }
}

#[test]
fn ints() {
    for v in -3i64..=130 {
        let mut tmp = [0u8; 20];
        let n = fmt_i64(v, &mut tmp);
        let want = &tmp[20 - n..];
        match small_dec(v) {
            Some(d) => assert_eq!(d, want, "{v}"),
            None => assert!(!(0..100).contains(&v), "{v}"),
        }
    }
    assert_eq!(parse_i64_ascii(b"-9223372036854775808"), Some(i64::MIN));
    assert_eq!(parse_i64_ascii(b"9223372036854775807"), Some(i64::MAX));
    assert_eq!(parse_i64_ascii(b"9223372036854775808"), None);
    assert_eq!(parse_i64_ascii(b"+7"), Some(7));
    assert_eq!(parse_i64_ascii(b"7 "), None);
    assert_eq!(parse_i64_ascii(b""), None);
    assert_eq!(JsonStr::from_raw(b"2147483648").parse_i32(), None);
    assert!(JsonStr::from_raw(b"TrUe").parse_bool());
    assert!(!JsonStr::from_raw(b"yes").parse_bool());
    for v in [0i64, 9, 10, -1, -10, i64::MIN, i64::MAX, 1_700_000_000_000] {
        let mut buf = [0u8; 32];
        let mut w = SliceWriter::new(&mut buf);
        w.put_i64_dec(v);
        let n = w.finish().unwrap();
        assert_eq!(&buf[..n], std::format!("{v}").as_bytes());
        assert_eq!(i64_dec_len(v), n);
    }
}

#[test]
fn writer_escapes_like_fastjson() {
    let cases: &[(&str, &str)] = &[
        ("abc", r#""abc""#),
        ("a\"b\\c/", r#""a\"b\\c/""#),
        ("\u{1}\u{2}\u{b}\u{1f}", r#""\u0001\u0002\u000b\u001f""#),
        ("\u{8}\t\n\u{c}\r", r#""\b\t\n\f\r""#),
        (
            "\u{7f}\u{80}\u{a0}\u{a1}é",
            "\"\\u007f\\u0080\\u00a0\u{a1}é\"",
        ),
        ("x\u{2028}y\u{2029}", "\"x\\u2028y\u{2029}\""),
        ("中文🙂", "\"中文🙂\""),
    ];
    for (input, want) in cases {
        let mut buf = [0u8; 64];
        let mut w = SliceWriter::new(&mut buf);
        w.put_json_str(input);
        let n = w.finish().unwrap();
        assert_eq!(core::str::from_utf8(&buf[..n]).unwrap(), *want);
        assert_eq!(json_str_len(input), n);
        // And it parses back.
        let s = Parser::new(&buf[..n]).string().unwrap();
        assert!(s.eq_str(input));
        for small in 0..n {
            let mut b = std::vec![0u8; small];
            let mut w = SliceWriter::new(&mut b);
            w.put_json_str(input);
            assert_eq!(w.finish(), Err(BufferTooSmall));
        }
    }
}

#[test]
fn array_helpers_and_skip() {
    let mut p = Parser::new(br#"{"skip":{"x":[1,{"y":[]}]},"arr":[ "a" , "b" ,],"n":5}"#);
    p.expect_object_start().unwrap();
    let mut seen = Vec::new();
    while let Some(k) = p.next_key().unwrap() {
        if k.eq_str("arr") {
            p.expect_array_start().unwrap();
            while p.array_next().unwrap() {
                seen.push(p.string().unwrap().as_str().unwrap());
            }
        } else if k.eq_str("n") {
            assert_eq!(p.i64().unwrap(), 5);
        } else {
            let span = p.skip_value_span().unwrap();
            assert_eq!(span, br#"{"x":[1,{"y":[]}]}"#);
        }
    }
    p.finish().unwrap();
    assert_eq!(seen, ["a", "b"]);
    let mut p = Parser::new(b"[]");
    p.expect_array_start().unwrap();
    assert!(!p.array_next().unwrap());
    p.finish().unwrap();
}

proptest::proptest! {
    #[test]
    fn never_panics(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
        let mut p = Parser::new(&data);
        let mut buf = [0u8; 64];
        for _ in 0..512 {
            match p.next_token() {
                Ok(Some(Token::Str(s) | Token::Key(s))) => {
                    let _ = s.unescape_into(&mut buf);
                    let _ = s.chars().count();
                    let _ = s.eq_str("abc");
                    let _ = s.parse_i64();
                }
                Ok(Some(_)) => {}
                _ => break,
            }
        }
        let mut p = Parser::new(&data);
        let _ = p.skip_value();
    }

    /// The SWAR writer against a char-by-char model of fastjson's escaping, on strings
    /// dense in the characters that matter (controls, quotes, U+007F..U+00A1, U+2028).
    #[test]
    fn writer_matches_char_model(
        s in "[\\x00-\\x7f\u{80}-\u{a1}\u{2028}\u{2029}é中🙂]{0,40}|[a-z\\x01\\x02\u{80}-\u{a1}\u{2028}é]{0,120}",
        room in 0usize..80,
    ) {
        let mut want = String::from("\"");
        for c in s.chars() {
            match c {
                '"' => want.push_str("\\\""),
                '\\' => want.push_str("\\\\"),
                '\u{8}' => want.push_str("\\b"),
                '\t' => want.push_str("\\t"),
                '\n' => want.push_str("\\n"),
                '\u{c}' => want.push_str("\\f"),
                '\r' => want.push_str("\\r"),
                '\0'..='\u{1f}' | '\u{7f}'..='\u{a0}' | '\u{2028}' => {
                    want.push_str(&std::format!("\\u{:04x}", u32::from(c)));
                }
                c => want.push(c),
            }
        }
        want.push('"');
        // Exactly the room needed, up to 80 bytes more (the word-at-a-time path needs 64
        // spare bytes), and with something written before the string.
        for lead in [0usize, 3] {
            let mut buf = std::vec![0xEEu8; lead + want.len() + room];
            let mut w = SliceWriter::new(&mut buf);
            w.put(&b"xyz"[..lead]);
            w.put_json_str(&s);
            let n = w.finish().unwrap();
            proptest::prop_assert_eq!(
                core::str::from_utf8(&buf[lead..n]).unwrap(),
                want.as_str()
            );
            proptest::prop_assert_eq!(json_str_len(&s), n - lead);
            // One byte less does not fit.
            let mut buf = std::vec![0u8; lead + want.len() - 1];
            let mut w = SliceWriter::new(&mut buf);
            w.put(&b"xyz"[..lead]);
            w.put_json_str(&s);
            proptest::prop_assert_eq!(w.finish(), Err(BufferTooSmall));
        }
    }

    /// Unescaping (word-at-a-time with the `\u00XX` shortcut) agrees with the reference
    /// walk on string bodies dense in escapes, valid or not, into buffers of every size
    /// around the result.
    #[test]
    fn unescape_matches_walk(
        pieces in proptest::collection::vec(
            proptest::prop_oneof![
                "[a-zA-Z0-9 é]{0,12}",
                "\\\\u00[0-9a-fA-FgG]{2}",
                "\\\\u[0-9a-fA-F]{4}",
                proptest::strategy::Just(String::from("\\uD83D\\uDE00")),
                "\\\\[nrtbf/\\\\\"'x]",
            ],
            0..24,
        ),
        room in 0usize..12,
    ) {
        let raw: String = pieces.concat();
        let js = JsonStr { raw: raw.as_bytes(), escaped: true };
        let mut want = Vec::new();
        let walked = js.walk(|c| {
            want.extend_from_slice(c);
            true
        });
        for len in [want.len().saturating_sub(1), want.len(), want.len() + room] {
            let mut buf = std::vec![0u8; len];
            let got = js.unescape_bytes_into(&mut buf);
            match (&walked, got) {
                (Ok(_), Ok(n)) => {
                    proptest::prop_assert_eq!(&buf[..n], &want[..]);
                }
                (Ok(_), Err(e)) => {
                    proptest::prop_assert!(len < want.len());
                    proptest::prop_assert_eq!(e.kind, JsonErrorKind::BufferTooSmall);
                }
                (Err(_), Ok(_)) => proptest::prop_assert!(false, "accepted a bad escape"),
                (Err(_), Err(_)) => {}
            }
        }
    }

    #[test]
    fn string_round_trip(s in ".*") {
        let mut buf = std::vec![0u8; json_str_len(&s)];
        let mut w = SliceWriter::new(&mut buf);
        w.put_json_str(&s);
        proptest::prop_assert_eq!(w.finish(), Ok(buf.len()));
        let js = Parser::new(&buf).string().unwrap();
        proptest::prop_assert!(js.eq_str(&s));
        let mut out = std::vec![0u8; s.len()];
        proptest::prop_assert_eq!(js.unescape_into(&mut out).unwrap(), s.as_str());
        proptest::prop_assert_eq!(js.chars().collect::<String>(), s);
    }
}
