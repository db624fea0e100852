//! The client id a producer or consumer announces (`ip@instanceName`), and the names it
//! uses on the wire in a namespace.

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

/// `name` as the wire has it in namespace `ns` ([`rmq_core::namespace::wrap`]); borrowed
/// when unchanged.
pub(crate) fn wire<'a>(ns: Option<&str>, name: &'a str) -> std::borrow::Cow<'a, str> {
    let Some(ns) = ns else {
        return name.into();
    };
    let w = rmq_core::namespace::wrap(ns, name);
    // Nothing added: `name` itself.
    match w.as_borrowed() {
        Some(_) => name.into(),
        None => w.to_string().into(),
    }
}

/// Wire name `name` as the application knows it ([`rmq_core::namespace::unwrap`]).
pub(crate) fn app(ns: Option<&str>, name: String) -> String {
    let Some(ns) = ns else {
        return name;
    };
    let u = rmq_core::namespace::unwrap(ns, &name);
    match u.as_borrowed() {
        Some(s) if s.len() == name.len() => name,
        Some(s) => s.to_owned(),
        None => u.to_string(),
    }
}
