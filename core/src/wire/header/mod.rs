//! Command headers: decoding ([`CommandHeader`], both formats) and encoding
//! ([`CommandRepr`] + [`ExtFields`]).
//!
//! - `command.rs`: [`CommandHeader`], a decoded header of either format: dispatch on the
//!   serialize type, getters, ext-field lookup;
//! - `repr.rs`: [`CommandRepr`], a header to encode: constructors, sizing, emitting with the
//!   frame prefix;
//! - `json.rs`: the JSON header codec (docs/protocol/WIRE.md §2): the fastjson-layout and
//!   compact fast paths, the full parser, the encoder;
//! - `rocketmq.rs`: the ROCKETMQ binary header codec (docs/protocol/WIRE.md §3): decoder and
//!   encoder;
//! - `ext.rs`: ext fields: the decoded [`ExtMap`] and [`ExtIter`], the sinks that collect
//!   fields during a parse, and what encoders take ([`ExtFields`], [`ExtValue`], [`Chain`]);
//! - `tests.rs`: the fast paths against the full parser.

mod command;
mod ext;
mod json;
mod repr;
mod rocketmq;
#[cfg(test)]
mod tests;

pub use command::CommandHeader;
pub use ext::{Chain, ExtFields, ExtIter, ExtMap, ExtValue, ExtVisitor};
pub(crate) use ext::{Collect, ExtSink};
pub use repr::CommandRepr;
