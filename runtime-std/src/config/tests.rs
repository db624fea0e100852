use super::*;

#[test]
fn builder_maps_java_knobs_onto_the_core_retry_config() {
    let b = ProducerBuilder::default()
        .namesrv_addr("a:9876; b:9876;")
        .namesrv_addr("c:9876")
        .send_msg_timeout(Duration::from_millis(1500))
        .retry_times_when_send_failed(4)
        .retry_times_when_send_async_failed(1)
        .retry_another_broker_when_not_store_ok(true);
    let c = b.config();
    assert_eq!(c.namesrv_addr, ["a:9876", "b:9876", "c:9876"]);
    let r = c.retry_config(SendMode::Sync);
    assert_eq!(r.profile, Profile::Adaptive, "our default");
    assert_eq!(r.send_timeout, rmq_core::time::Duration::from_millis(1500));
    assert_eq!(r.max_attempts(), 5);
    assert_eq!(c.retry_config(SendMode::Async).max_attempts(), 2);
    assert_eq!(c.retry_config(SendMode::Oneway).max_attempts(), 1);
    assert!(r.retry_another_broker_when_not_store_ok);
    assert_eq!(r.adaptive, RUNTIME_ADAPTIVE);
    assert_eq!(c.language, LanguageCode::RUST);

    let off = ProducerBuilder::default().send_latency_fault_enable(false);
    assert_eq!(off.config().profile(), Profile::Plain);
    let j49 = ProducerBuilder::default().fault_profile(FaultProfile::Java49);
    assert_eq!(j49.config().profile(), Profile::Java49);
    let j5 = ProducerBuilder::default().fault_profile(FaultProfile::Java5);
    assert_eq!(j5.config().profile(), Profile::Java5);
}

#[tokio::test]
async fn start_refuses_bad_configuration() {
    let e = ProducerBuilder::default().start().await.unwrap_err();
    assert_eq!(e, ConfigError::NoNameServer);
    let e = ProducerBuilder::default()
        .namesrv_addr("127.0.0.1:9876")
        .producer_group("bad group!")
        .start()
        .await
        .unwrap_err();
    assert!(matches!(e, ConfigError::Group(_)), "{e:?}");
}
