//! Broker addresses from route data.

use smoltcp::wire::{IpAddress, IpEndpoint, Ipv4Address};

/// Parses `"a.b.c.d:port"` (the form brokers register with) into an endpoint. IPv6 and host
/// names are not supported (`None`).
pub fn parse_endpoint(s: &str) -> Option<IpEndpoint> {
    let (host, port) = s.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let mut octets = [0u8; 4];
    let mut parts = host.split('.');
    for o in octets.iter_mut() {
        *o = parts.next()?.parse().ok()?;
    }
    if parts.next().is_some() || port == 0 {
        return None;
    }
    let [a, b, c, d] = octets;
    Some(IpEndpoint::new(
        IpAddress::Ipv4(Ipv4Address::new(a, b, c, d)),
        port,
    ))
}

#[cfg(test)]
mod tests {
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
}
