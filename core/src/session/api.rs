//! What a layer on top of the session (the pull consumer, a runtime's sending side) asks of
//! it.

use super::*;

/// What a layer on top of the client session (the pull consumer, a runtime's sending side)
/// asks of it; every [`Session`] implements it, so such a layer needs none of the session's
/// type parameters.
pub trait SessionApi {
    /// What the session compiles in (the pull consumer leaves out the paths it does not).
    type Features: Features;
    /// [`Session::topic`].
    ///
    /// # Errors
    /// [`SubmitError`].
    fn topic(&mut self, now: Instant, topic: &str) -> Result<TopicId, SubmitError>;
    /// [`Session::topic_name`].
    fn topic_name(&self, t: TopicId) -> Option<&str>;
    /// [`Session::broker_name`].
    fn broker_name(&self, b: BrokerId) -> Option<&str>;
    /// [`Session::subscribe_queues`].
    fn subscribe_queues(&self, t: TopicId) -> &[PublishQueue<BrokerId>];
    /// [`Session::publish_queues`].
    fn publish_queues(&self, t: TopicId) -> &[PublishQueue<BrokerId>];
    /// [`Session::send`].
    ///
    /// # Errors
    /// [`SubmitError`].
    fn send(
        &mut self,
        now: Instant,
        t: TopicId,
        args: &SendArgs<'_>,
    ) -> Result<SendId, SubmitError>;
    /// [`Session::read_peer`].
    fn read_peer(&self, b: BrokerId, slave: bool) -> Peer;
    /// [`Session::refresh_route`].
    fn refresh_route(&mut self, now: Instant, t: TopicId);
    /// [`Session::call`].
    ///
    /// # Errors
    /// [`CallError`].
    #[allow(clippy::too_many_arguments)]
    fn call<E: crate::wire::ExtFields, M: Outbound + ?Sized>(
        &mut self,
        now: Instant,
        peer: Peer,
        code: RequestCode,
        ext: Option<E>,
        body: &[u8],
        timeout: Duration,
        buf: &mut [u8],
        out: &M,
    ) -> Result<Transmit, CallError>;
}

impl<
    const TOPICS: usize,
    const BROKERS: usize,
    const QUEUES: usize,
    const REQUESTS: usize,
    const SENDS: usize,
    const ROUTE_STR: usize,
    F: Features,
    St: Store,
> SessionApi for Session<TOPICS, BROKERS, QUEUES, REQUESTS, SENDS, ROUTE_STR, F, St>
{
    type Features = F;
    fn topic(&mut self, now: Instant, topic: &str) -> Result<TopicId, SubmitError> {
        Session::topic(self, now, topic)
    }
    fn topic_name(&self, t: TopicId) -> Option<&str> {
        Session::topic_name(self, t)
    }
    fn broker_name(&self, b: BrokerId) -> Option<&str> {
        Session::broker_name(self, b)
    }
    fn subscribe_queues(&self, t: TopicId) -> &[PublishQueue<BrokerId>] {
        Session::subscribe_queues(self, t)
    }
    fn publish_queues(&self, t: TopicId) -> &[PublishQueue<BrokerId>] {
        Session::publish_queues(self, t)
    }
    fn send(
        &mut self,
        now: Instant,
        t: TopicId,
        args: &SendArgs<'_>,
    ) -> Result<SendId, SubmitError> {
        Session::send(self, now, t, args)
    }
    fn read_peer(&self, b: BrokerId, slave: bool) -> Peer {
        Session::read_peer(self, b, slave)
    }
    fn refresh_route(&mut self, now: Instant, t: TopicId) {
        Session::refresh_route(self, now, t);
    }
    fn call<E: crate::wire::ExtFields, M: Outbound + ?Sized>(
        &mut self,
        now: Instant,
        peer: Peer,
        code: RequestCode,
        ext: Option<E>,
        body: &[u8],
        timeout: Duration,
        buf: &mut [u8],
        out: &M,
    ) -> Result<Transmit, CallError> {
        Session::call(self, now, peer, code, ext, body, timeout, buf, out)
    }
}
