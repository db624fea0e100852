//! Java's `MixAll.getWSAddr`, `DefaultTopAddressing.clearNewLine` and the client's fetch
//! schedule (docs/protocol/DISCOVERY.md), case by case.

use super::*;

#[test]
fn the_endpoint_is_port_8080_unless_the_domain_names_one() {
    let e = Endpoint::new("jmenv.tbsite.net", DEFAULT_SUBGROUP);
    assert_eq!((e.host(), e.port()), ("jmenv.tbsite.net", 8080));
    let e = Endpoint::new("127.0.0.1:18080", "unit-a");
    assert_eq!((e.host(), e.port()), ("127.0.0.1", 18080));
    let mut buf = [0u8; 256];
    let n = e.write_request(&mut buf).unwrap();
    assert_eq!(
        core::str::from_utf8(&buf[..n]).unwrap(),
        "GET /rocketmq/unit-a HTTP/1.0\r\nHost: 127.0.0.1:18080\r\nConnection: close\r\n\r\n"
    );
    // Too small a buffer is an error, never a truncated request.
    assert!(e.write_request(&mut buf[..20]).is_err());
    // A port that does not parse: Java would build a URL that fails; rmq asks port 8080.
    assert_eq!(Endpoint::new("h:x", "g").port(), 8080);
}

#[test]
fn only_a_200_answer_has_a_body() {
    assert_eq!(
        response_body(b"HTTP/1.0 200 OK\r\nX: y\r\n\r\na:1;b:2"),
        Ok(&b"a:1;b:2"[..])
    );
    assert_eq!(
        response_body(b"HTTP/1.1 404 Not Found\r\n\r\nnope"),
        Err(ResponseError::Status(404))
    );
    for bad in [
        &b"HTTP/1.1 200 OK\r\n"[..],
        b"SSH-2.0-x\r\n\r\n",
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"",
        b"\xff\xfe\r\n\r\n",
    ] {
        assert_eq!(response_body(bad), Err(ResponseError::Malformed), "{bad:?}");
    }
}

/// An answer that names its length ends there, whether or not the server closes.
#[test]
fn content_length_ends_the_answer() {
    let whole = b"HTTP/1.1 200 OK\r\ncontent-Length: 7\r\n\r\na:1;b:2";
    assert_eq!(answer_len(whole), Some(whole.len()));
    assert_eq!(answer_len(&whole[..20]), None, "the head is not in yet");
    assert_eq!(
        answer_len(b"HTTP/1.0 200 OK\r\n\r\na:1"),
        None,
        "read to the end"
    );
    let more = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\na:1;junk";
    assert_eq!(response_body(more), Ok(&b"a:1"[..]));
    // A length beyond what came (the server closed early) keeps what came.
    let short = b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\na:1";
    assert_eq!(response_body(short), Ok(&b"a:1"[..]));
    assert_eq!(
        answer_len(b"HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551615\r\n\r\n"),
        None,
        "no overflow"
    );
}

#[test]
fn the_list_is_the_first_line_trimmed_and_its_addresses_split_by_semicolons() {
    assert_eq!(list_of(b"  a:1;b:2 \r\nignored"), Some("a:1;b:2"));
    assert_eq!(list_of(b"\n a:1\nb:2"), Some("a:1"));
    assert_eq!(list_of(b" \r\n "), None);
    assert_eq!(list_of(b"\xff"), None);
    let all: std::vec::Vec<_> = addresses("a:1; b:2;;c:3;").collect();
    assert_eq!(all, ["a:1", "b:2", "c:3"]);
}

#[test]
fn fetches_are_due_at_once_then_after_ten_seconds_then_every_period() {
    let t0 = Instant::from_millis(5_000);
    let mut d = Discovery::default();
    assert_eq!(d.next_fetch(), None);
    assert!(d.changed(t0, "a:1;b:2"));
    assert_eq!(d.next_fetch(), Some(t0 + FIRST_REFRESH));
    let t1 = t0 + FIRST_REFRESH;
    // The same list, spelled differently: no change.
    assert!(!d.changed(t1, " a:1; b:2;"));
    assert_eq!(d.next_fetch(), Some(t1 + REFRESH_PERIOD));
    // A failed fetch keeps the list and the schedule.
    let t2 = t1 + REFRESH_PERIOD;
    d.fetched(t2);
    assert_eq!(d.next_fetch(), Some(t2 + REFRESH_PERIOD));
    assert!(
        !d.changed(t2, "b:2;a:1"),
        "another order is the same list (as Java's)"
    );
    assert!(d.changed(t2, "c:3"));
    assert!(
        d.changed(t2, "c:3;c:3"),
        "a repeated address is another list"
    );
    // A short period is never lengthened by the first refresh, and never below 1 s.
    let mut quick = Discovery::new(Duration::from_millis(1_500));
    quick.fetched(t0);
    assert_eq!(quick.next_fetch(), Some(t0 + Duration::from_millis(1_500)));
    for zero in [Duration::ZERO, Duration::from_millis(1)] {
        let mut d = Discovery::new(zero);
        d.fetched(t0);
        assert_eq!(d.next_fetch(), Some(t0 + MIN_PERIOD));
    }
}
