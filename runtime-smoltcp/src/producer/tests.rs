use core::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use rmq_core::retry::{RetryConfig, SendMode};

use super::*;

#[test]
fn only_the_plain_and_java49_profiles_are_carried() {
    let ns = [SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9876))];
    for (retry, ok) in [
        (RetryConfig::plain(SendMode::Sync), true),
        (RetryConfig::java49(SendMode::Sync), true),
        (RetryConfig::java5(SendMode::Sync), false),
        (RetryConfig::adaptive(SendMode::Sync), false),
    ] {
        let mut cfg = Config::new(&ns, "pg", "T");
        cfg.base.retry = retry;
        let r = ProducerMachine::<1, 4, 256>::check(&cfg);
        match r {
            Ok(_) => assert!(ok, "{:?} accepted", retry.profile),
            Err(e) => {
                assert!(!ok, "{:?} refused", retry.profile);
                assert_eq!(e, session::ConfigError::ProfileLeftOut);
            }
        }
    }
}
