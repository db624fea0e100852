//! [`TransportError`]: a failure below the protocol (connecting, writing, no answer in time,
//! a lost connection, an unknown broker address, bytes that are not a frame), as the runtimes
//! report it to the session and the session to the retry plan.

/// A failure below the protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TransportError {
    /// TCP connect failed or was refused.
    ConnectFailed,
    /// Writing the request failed.
    WriteFailed,
    /// No answer before the attempt's deadline.
    TimedOut,
    /// The connection closed with the request pending.
    ConnectionClosed,
    /// The runtime has no address for this broker (Java "The broker\[x\] not exist").
    BrokerNotFound,
    /// The peer sent bytes that are not a valid frame or header; the runtime closed the
    /// connection and everything in flight on it failed with this.
    Malformed,
}
