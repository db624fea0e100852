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
mod tests;
