//! Java's `NamespaceUtil` (5.3.3) case by case: wrapNamespace, withoutNamespace(name, ns),
//! wrapNamespaceAndRetry.

use super::*;
use std::string::{String, ToString};

fn w(ns: &str, name: &str) -> String {
    wrap(ns, name).to_string()
}

fn u(ns: &str, name: &str) -> String {
    unwrap(ns, name).to_string()
}

#[test]
fn wrap_as_java() {
    let cases = [
        ("ns", "T", "ns%T"),
        ("ns", "%RETRY%G", "%RETRY%ns%G"),
        ("ns", "%DLQ%G", "%DLQ%ns%G"),
        ("ns", "ns%T", "ns%T"),
        ("ns", "%RETRY%ns%G", "%RETRY%ns%G"),
        ("ns", "other%T", "ns%other%T"),
        ("ns", "nsX%T", "ns%nsX%T"),
        ("ns", "TBW102", "TBW102"),
        ("ns", "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRACE_TOPIC"),
        ("ns", "rmq_sys_anything", "rmq_sys_anything"),
        ("ns", "CID_RMQ_SYS_X", "CID_RMQ_SYS_X"),
        ("", "T", "T"),
        ("ns", "", ""),
    ];
    for (ns, name, java) in cases {
        assert_eq!(w(ns, name), java, "wrap({ns:?}, {name:?})");
    }
    // wrapNamespaceAndRetry(ns, group) is the retry prefix before the wrapped group.
    assert_eq!(format!("{RETRY_PREFIX}{}", wrap("ns", "G")), "%RETRY%ns%G");
}

#[test]
fn unwrap_as_java() {
    let cases = [
        ("ns", "ns%T", "T"),
        ("ns", "%RETRY%ns%G", "%RETRY%G"),
        ("ns", "%DLQ%ns%G", "%DLQ%G"),
        ("ns", "T", "T"),
        ("ns", "other%T", "other%T"),
        ("ns", "nsX%T", "nsX%T"),
        ("ns", "ns%a%b", "a%b"),
        ("ns", "TBW102", "TBW102"),
        ("", "ns%T", "ns%T"),
        ("ns", "", ""),
    ];
    for (ns, name, java) in cases {
        assert_eq!(u(ns, name), java, "unwrap({ns:?}, {name:?})");
    }
    // Round trip for the application's names.
    for name in ["T", "%RETRY%G", "%DLQ%G", "a%b"] {
        assert_eq!(u("ns", &w("ns", name)), name);
    }
}

#[test]
fn v2_fields_go_on_the_request_and_are_signed() {
    use crate::acl::{Credentials, emit_request};
    use crate::wire::{Chain, CommandRepr, RequestCode, SerializeType, version};
    let creds = Credentials {
        access_key: "ak",
        secret_key: "sk",
        security_token: None,
    };
    let repr = CommandRepr::request(RequestCode::HEART_BEAT, 7, version::V5_3_3, None::<()>);
    let emit = |v2: Option<&str>| {
        let mut head = [0u8; 1024];
        let ext = Chain([("topic", "T")], V2Fields(v2));
        let n = emit_request(
            &repr,
            ext,
            Some(&creds),
            SerializeType::JSON,
            (&[], 0),
            &mut head,
        )
        .unwrap();
        String::from_utf8_lossy(&head[8..n]).into_owned()
    };
    let signature = |h: &str| {
        let at = h.find("\"Signature\":\"").expect("signed") + 13;
        h[at..at + h[at..].find('"').unwrap()].to_string()
    };
    let (plain, v2) = (emit(None), emit(Some("v2ns")));
    assert!(
        !plain.contains("\"nsd\"") && !plain.contains("\"ns\""),
        "{plain}"
    );
    assert!(
        v2.contains("\"nsd\":\"true\"") && v2.contains("\"ns\":\"v2ns\""),
        "{v2}"
    );
    // The signature covers them (it changes with them).
    assert_ne!(signature(&plain), signature(&v2));
}

/// A result that is one borrowed string needs no formatting (rmq-std's per-send names).
#[test]
fn borrowed_results() {
    assert_eq!(wrap("ns", "T").as_borrowed(), None);
    assert_eq!(wrap("ns", "TBW102").as_borrowed(), Some("TBW102"));
    assert_eq!(wrap("ns", "ns%T").as_borrowed(), Some("ns%T"));
    assert_eq!(wrap("", "T").as_borrowed(), Some("T"));
    assert_eq!(unwrap("ns", "ns%T").as_borrowed(), Some("T"));
    assert_eq!(unwrap("ns", "other%T").as_borrowed(), Some("other%T"));
    assert_eq!(unwrap("ns", "%RETRY%ns%G").as_borrowed(), None);
}
