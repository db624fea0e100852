use super::*;

#[test]
fn parses_broker_addresses() {
    let e = parse_endpoint("127.0.0.1:10911").unwrap();
    assert_eq!(e.port, 10911);
    assert_eq!(e.addr, IpAddress::Ipv4(Ipv4Address::new(127, 0, 0, 1)));
    for bad in [
        "",
        "1.2.3.4",
        "1.2.3:5",
        "1.2.3.4.5:6",
        "1.2.3.256:1",
        "a.b.c.d:1",
        "1.2.3.4:0",
        "1.2.3.4:65536",
        "[::1]:10911",
    ] {
        assert_eq!(parse_endpoint(bad), None, "{bad}");
    }
}
