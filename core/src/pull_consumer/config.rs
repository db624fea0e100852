//! How a pull consumer is set up ([`PullConfig`]) and what it refuses.

use super::*;

/// How a [`PullConsumer`] behaves. [`PullConfig::new`] has Java's defaults.
#[derive(Clone, Copy, Debug)]
pub struct PullConfig<'a> {
    /// Consumer group.
    pub group: &'a str,
    /// This client's id (`ip@instance`), as its heartbeats announce it.
    pub client_id: &'a str,
    /// Queue allocation strategy.
    pub strategy: AllocateStrategy,
    /// Where a queue without a committed offset starts.
    pub consume_from: ConsumeFromWhere,
    /// The store timestamp (ms) [`ConsumeFromWhere::Timestamp`] starts from (Java's default:
    /// half an hour before the consumer started).
    pub consume_timestamp: i64,
    /// Flow-control thresholds per queue.
    pub flow: FlowLimits,
    /// `pullBatchSize`.
    pub pull_batch_size: u32,
    /// How long the broker may hold a pull (`None`: no long polling).
    pub suspend: Option<Duration>,
    /// Back-off after a failed pull (Java 5.x: 1 s; 4.9: 3 s).
    pub pull_exception_delay: Duration,
    /// Time between rebalance rounds.
    pub rebalance_interval: Duration,
    /// Time between offset commits.
    pub persist_interval: Duration,
    /// Protocol version announced (GET_MAX_OFFSET's `committed` flag from 5.0).
    pub version: i32,
    /// `subVersion` of the subscriptions (a millisecond timestamp).
    pub sub_version: i64,
    /// Seed of the random broker choice for GET_CONSUMER_LIST_BY_GROUP.
    pub seed: u32,
    /// Deliveries of a message before the broker moves it to `%DLQ%<group>` (sent with every
    /// send-back; default 16).
    pub max_reconsume_times: i32,
    /// Subscribe `%RETRY%<group>` with the first subscription, where messages sent back
    /// return (a clustering Java consumer does; default `true`; never when broadcasting).
    pub retry: bool,
    /// Clustering (the group shares the queues, offsets on the broker) or broadcasting (every
    /// consumer reads every queue, offsets kept by the runtime: [`PullEvent::LoadOffset`] and
    /// [`PullEvent::Persist`]).
    pub model: MessageModel,
    /// Orderly consumption: queues locked on their broker before they are pulled, and
    /// processed between [`PullConsumer::begin`] and [`PullConsumer::end`] (see
    /// [`crate::lock`]).
    pub orderly: bool,
    /// Every message counts as acknowledged once the `deliver` closure of
    /// [`PullConsumer::handle_response`] returns (a gateway that applies each command
    /// there; default `false`: the application acknowledges with [`PullConsumer::ack`]).
    pub ack_on_delivery: bool,
    /// A start whose SQL92 check cannot reach its broker goes on (a refusal fails it all the
    /// same; default `false`: it fails, as Java's does; see [`PullConsumer::check_filters`]).
    pub lazy_start: bool,
}

impl<'a> PullConfig<'a> {
    /// Java's defaults for `group` and `client_id`.
    pub fn new(group: &'a str, client_id: &'a str) -> Self {
        PullConfig {
            group,
            client_id,
            strategy: AllocateStrategy::Averagely,
            consume_from: ConsumeFromWhere::LastOffset,
            consume_timestamp: 0,
            flow: FlowLimits::default(),
            pull_batch_size: PULL_BATCH_SIZE,
            suspend: Some(BROKER_SUSPEND_MAX_TIME),
            pull_exception_delay: PULL_EXCEPTION_DELAY_V5,
            rebalance_interval: REBALANCE_INTERVAL,
            persist_interval: PERSIST_OFFSET_INTERVAL,
            version: version::V5_3_3,
            sub_version: 0,
            seed: 1,
            max_reconsume_times: MAX_RECONSUME_TIMES,
            retry: true,
            model: MessageModel::Clustering,
            orderly: false,
            ack_on_delivery: false,
            lazy_start: false,
        }
    }
}

impl PullConfig<'_> {
    /// [`PullConsumer::new`]'s checks, without building a consumer (see
    /// [`PullConsumer::build`]).
    ///
    /// # Errors
    /// [`PullConfigError::Name`].
    pub fn check(&self) -> Result<(), PullConfigError> {
        let fits = |s: &str| !s.is_empty() && s.len() <= MAX_NAME;
        match fits(self.group) && fits(self.client_id) {
            true => Ok(()),
            false => Err(PullConfigError::Name),
        }
    }
}

/// Why a [`PullConsumer`] could not be built or a subscription added.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PullConfigError {
    /// The group or client id is empty or longer than [`MAX_NAME`].
    Name,
    /// The expression is longer than [`MAX_EXPRESSION`].
    Expression,
    /// Every subscription slot is in use.
    TooManySubscriptions,
    /// The topic is subscribed already.
    Duplicate,
    /// The session refused the topic (full, or name too long).
    Topic,
    /// Orderly consumption, broadcasting or a timestamp start was asked for, and the
    /// session's [`Features`] leave it out.
    Unsupported,
}

impl fmt::Display for PullConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PullConfigError::Name => "consumer group or client id empty or too long",
            PullConfigError::Expression => "subscription expression too long",
            PullConfigError::TooManySubscriptions => "too many subscriptions",
            PullConfigError::Duplicate => "topic subscribed twice",
            PullConfigError::Topic => "the session refused the topic",
            PullConfigError::Unsupported => {
                "orderly or broadcasting consumption or timestamp starts are not compiled in"
            }
        })
    }
}

impl core::error::Error for PullConfigError {}
