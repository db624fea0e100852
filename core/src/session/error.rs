//! Why the session refuses a command, a frame or a call, and why a send failed.

use super::*;

/// Why the session refused a command (resource errors: nothing was changed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum SubmitError {
    /// Every send slot is in use (a finished send frees its slot when its event is polled).
    TooManySends,
    /// The topic table is full.
    TooManyTopics,
    /// The topic name is longer than [`MAX_TOPIC_LEN`].
    TopicTooLong,
    /// No such topic (a stale [`TopicId`]).
    UnknownTopic,
    /// The send's fault profile ([`RetryConfig::profile`]) is left out of this session's
    /// [`Features`] ([`Features::PROFILE_JAVA5`], [`Features::PROFILE_ADAPTIVE`]).
    ProfileLeftOut,
    /// The send names its queue ([`Target`](super::Target)) and the session's [`Features`]
    /// leave targeted sends out ([`Features::TARGETS`]).
    TargetLeftOut,
    /// A target's broker name is longer than [`MAX_BROKER_NAME`](super::MAX_BROKER_NAME).
    BrokerNameTooLong,
}

impl fmt::Display for SubmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SubmitError::TooManySends => "too many sends in flight",
            SubmitError::TooManyTopics => "too many topics",
            SubmitError::TopicTooLong => "topic name is too long",
            SubmitError::UnknownTopic => "unknown topic id",
            SubmitError::ProfileLeftOut => "fault profile not compiled into this session",
            SubmitError::TargetLeftOut => {
                "sends to a chosen queue are not compiled into this session"
            }
            SubmitError::BrokerNameTooLong => "broker name is too long",
        })
    }
}

impl core::error::Error for SubmitError {}

/// A frame the peer sent that cannot be read: the runtime closes that connection (and then
/// calls [`Session::handle_closed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum FrameError {
    /// The length words are inconsistent.
    Framing(crate::wire::FrameError),
    /// The header cannot be decoded.
    Header(crate::wire::DecodeError),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Framing(e) => write!(f, "malformed frame: {e}"),
            FrameError::Header(e) => write!(f, "malformed header: {e}"),
        }
    }
}

impl core::error::Error for FrameError {}

/// Why a send failed. Exhaustive on purpose: a runtime's mapping of it must name every case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SendFailure {
    /// The retry plan gave up (no route, broker codes, transport failures, timeout).
    Plan {
        /// The plan's error.
        error: SendError,
        /// The remark of the broker's last rejecting response (empty if none).
        remark: String<MAX_REMARK>,
        /// The broker of the last attempt (`None` when no attempt was made), so that a runtime
        /// can attach what it knows about that connection's failure.
        broker: Option<BrokerId>,
    },
    /// The request header did not fit the transmit buffer.
    Encode(EncodeError),
    /// The request could not be signed with the ACL credentials.
    Acl(AclError),
    /// The broker refused the credentials (ACL): not retried, since every broker refuses them
    /// alike.
    Authentication {
        /// The response code.
        code: i32,
        /// Attempts made.
        attempts: u8,
        /// The broker's remark.
        remark: String<MAX_REMARK>,
    },
    /// A status response without msgId, queueId or queueOffset.
    MalformedResponse {
        /// Attempts made.
        attempts: u8,
    },
    /// The request table was full.
    TooManyRequests,
    /// No NameServer answered the lookups of the send's topic before its deadline (Java's
    /// "No name server address" / connect failures), so it has no route.
    NoNameServer,
    /// The send's [`Target::Queue`](super::Target::Queue) names a broker the topic's route
    /// does not (Java's "The broker[..] not exist").
    NoSuchBroker,
    /// A timer message for a broker older than 5.0, which would ignore its delivery time and
    /// deliver it at once; nothing was sent. The version is the broker's remoting version
    /// ([`crate::wire::version`]), from its last answer or, before it answered, the
    /// NameServer's.
    TimerUnsupported {
        /// The remoting version that refused it (e.g. 407 for 4.9.7).
        broker_version: i32,
    },
    /// The broker refused a timer message for good: too far ahead or its timer wheel off (not
    /// retried, no fault counted against it). Flow control is retried and, if every attempt
    /// meets it, ends as [`SendFailure::Plan`] with the broker's code and remark.
    TimerRefused {
        /// Why.
        refusal: crate::producer::TimerRefusal,
        /// The response code (13 or 1).
        code: i32,
        /// Attempts made.
        attempts: u8,
        /// The broker's remark.
        remark: String<MAX_REMARK>,
    },
}

impl SendFailure {
    /// The broker of the last attempt, when the retry plan made one.
    pub fn broker(&self) -> Option<BrokerId> {
        match self {
            SendFailure::Plan { broker, .. } => *broker,
            SendFailure::NoNameServer
            | SendFailure::NoSuchBroker
            | SendFailure::TimerUnsupported { .. }
            | SendFailure::TimerRefused { .. }
            | SendFailure::Encode(_)
            | SendFailure::Acl(_)
            | SendFailure::Authentication { .. }
            | SendFailure::MalformedResponse { .. }
            | SendFailure::TooManyRequests => None,
        }
    }

    /// Whether sending the same message again later may succeed (what a store-and-forward
    /// outbox keeps it for, [`crate::outbox::Verdict::Retry`]): the retry plan's retryable
    /// errors (transport failures, timeouts, no route, broker codes in the retry set) and a
    /// full request table. Refused credentials, a header that does not fit and a malformed
    /// answer (the broker may have stored the message) are final.
    pub fn is_retryable(&self) -> bool {
        match self {
            SendFailure::Plan { error, .. } => error.is_retryable(),
            SendFailure::TooManyRequests | SendFailure::NoNameServer => true,
            SendFailure::NoSuchBroker
            | SendFailure::TimerUnsupported { .. }
            | SendFailure::TimerRefused { .. } => false,
            SendFailure::Encode(_)
            | SendFailure::Acl(_)
            | SendFailure::Authentication { .. }
            | SendFailure::MalformedResponse { .. } => false,
        }
    }

    /// Why a broker refused a timer message: [`SendFailure::TimerRefused`], or a retry plan
    /// that ended on a broker's timer refusal (flow control, which is retried).
    pub fn timer_refusal(&self) -> Option<crate::producer::TimerRefusal> {
        match self {
            SendFailure::TimerRefused { refusal, .. } => Some(*refusal),
            SendFailure::Plan { error, remark, .. } => match error.kind() {
                crate::retry::SendErrorKind::Broker { code } => {
                    crate::producer::TimerRefusal::of(code, remark)
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// Attempts made before the failure.
    pub fn attempts(&self) -> u8 {
        match self {
            SendFailure::Plan { error, .. } => error.attempts(),
            SendFailure::MalformedResponse { attempts }
            | SendFailure::Authentication { attempts, .. }
            | SendFailure::TimerRefused { attempts, .. } => *attempts,
            SendFailure::Encode(_)
            | SendFailure::Acl(_)
            | SendFailure::TooManyRequests
            | SendFailure::NoNameServer
            | SendFailure::NoSuchBroker
            | SendFailure::TimerUnsupported { .. } => 0,
        }
    }
}

impl fmt::Display for SendFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendFailure::Plan { error, remark, .. } if remark.is_empty() => {
                fmt::Display::fmt(error, f)
            }
            SendFailure::Plan { error, remark, .. } => write!(f, "{error}: {remark}"),
            SendFailure::Encode(e) => write!(f, "cannot encode the request: {e}"),
            SendFailure::Acl(e) => write!(f, "cannot sign the request: {e}"),
            SendFailure::Authentication { code, remark, .. } => {
                write!(
                    f,
                    "the broker refused the credentials (code {code}): {remark}"
                )
            }
            SendFailure::MalformedResponse { .. } => {
                f.write_str("send response without msgId, queueId or queueOffset")
            }
            SendFailure::TooManyRequests => f.write_str("too many requests in flight"),
            SendFailure::NoNameServer => f.write_str("no name server answered: no route"),
            SendFailure::NoSuchBroker => f.write_str("the broker is not in the topic's route"),
            SendFailure::TimerRefused {
                refusal,
                code,
                remark,
                ..
            } => write!(
                f,
                "the broker refused the timer message: {refusal} (code {code}: {remark})"
            ),
            SendFailure::TimerUnsupported { broker_version } => write!(
                f,
                "timer messages need a 5.x broker; this one is older (remoting version {broker_version}) and would deliver it at once"
            ),
        }
    }
}

impl core::error::Error for SendFailure {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            SendFailure::Plan { error, .. } => Some(error),
            SendFailure::Encode(e) => Some(e),
            SendFailure::Acl(e) => Some(e),
            _ => None,
        }
    }
}

/// Why [`Session::call`] refused a request (nothing was registered).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallError {
    /// Every request slot is in use.
    TooManyRequests,
    /// The request does not fit the buffer (or a frame).
    Encode(EncodeError),
    /// The request cannot be signed.
    Acl(AclError),
    /// This session was built without [`Features::CONSUMER`].
    Unsupported,
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::TooManyRequests => f.write_str("too many requests in flight"),
            CallError::Encode(e) => write!(f, "cannot encode the request: {e}"),
            CallError::Acl(e) => write!(f, "cannot sign the request: {e}"),
            CallError::Unsupported => f.write_str("runtime calls are not compiled in"),
        }
    }
}

impl core::error::Error for CallError {}
