//! The client id a producer or consumer announces (`ip@instanceName`).

use std::net::{IpAddr, Ipv4Addr};

use rmq_core::producer::write_client_id;

/// The local address that routes to the first NameServer (no packet is sent), or loopback.
pub(crate) fn local_ip(namesrv_addrs: &[String]) -> IpAddr {
    let namesrv = namesrv_addrs
        .first()
        .map_or("127.0.0.1:9876", |s| s.as_str());
    std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| {
            s.connect(namesrv)?;
            s.local_addr()
        })
        .map(|a| a.ip())
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// The client id (`ip@instanceName`, core `write_client_id`).
pub(crate) fn client_id(ip: IpAddr, instance_name: &str) -> String {
    let mut idbuf = [0u8; 512];
    write_client_id(ip, instance_name, &mut idbuf)
        .ok()
        .and_then(|n| std::str::from_utf8(&idbuf[..n]).ok().map(str::to_owned))
        .unwrap_or_else(|| format!("{ip}@{instance_name}"))
}
