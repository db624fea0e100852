//! Namespaces, version 1 (Java's `ClientConfig.namespace`, `NamespaceUtil`; docs/protocol/NAMESPACE.md):
//! a client in namespace `ns` names topic `T` `ns%T` and group `G` `ns%G` on the wire, its retry
//! and dead-letter topics `%RETRY%ns%G` and `%DLQ%ns%G`; system topics and groups keep their
//! names. What the application sees is unwrapped again.
//!
//! ```
//! use rmq_core::namespace::{unwrap, wrap};
//! assert_eq!(wrap("ns", "Orders").to_string(), "ns%Orders");
//! assert_eq!(wrap("ns", "%RETRY%group").to_string(), "%RETRY%ns%group");
//! assert_eq!(wrap("ns", "ns%Orders").to_string(), "ns%Orders"); // already in it
//! assert_eq!(wrap("ns", "TBW102").to_string(), "TBW102"); // a system topic
//! assert_eq!(unwrap("ns", "%DLQ%ns%group").to_string(), "%DLQ%group");
//! assert_eq!(unwrap("ns", "other%Orders").to_string(), "other%Orders"); // not this namespace
//! ```

use core::fmt;

/// Between a namespace and a name.
pub const SEPARATOR: char = '%';
/// Java `MixAll.RETRY_GROUP_TOPIC_PREFIX`.
pub const RETRY_PREFIX: &str = "%RETRY%";
/// Java `MixAll.DLQ_GROUP_TOPIC_PREFIX`.
pub const DLQ_PREFIX: &str = "%DLQ%";

/// Java `TopicValidator.SYSTEM_TOPIC_SET` (as the client starts with it).
const SYSTEM_TOPICS: [&str; 10] = [
    "TBW102",
    "SCHEDULE_TOPIC_XXXX",
    "BenchmarkTest",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRACE_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
    "CHECKPOINT_TOPIC",
];

/// Whether `name` is a system topic or group, never put in a namespace (Java
/// `NamespaceUtil.isSystemResource`: the system topics, `rmq_sys_*`, `CID_RMQ_SYS_*`).
pub fn is_system(name: &str) -> bool {
    SYSTEM_TOPICS.contains(&name)
        || name.starts_with("rmq_sys_")
        || name.starts_with("CID_RMQ_SYS_")
}

/// `name`'s retry or dead-letter prefix, and the rest.
fn split_prefix(name: &str) -> (&'static str, &str) {
    if let Some(rest) = name.strip_prefix(RETRY_PREFIX) {
        (RETRY_PREFIX, rest)
    } else if let Some(rest) = name.strip_prefix(DLQ_PREFIX) {
        (DLQ_PREFIX, rest)
    } else {
        ("", name)
    }
}

/// A name with its namespace (or as it was), written by [`fmt::Display`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wrapped<'a> {
    prefix: &'static str,
    namespace: Option<&'a str>,
    rest: &'a str,
}

impl fmt::Display for Wrapped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.prefix)?;
        if let Some(ns) = self.namespace {
            f.write_str(ns)?;
            fmt::Write::write_char(f, SEPARATOR)?;
        }
        f.write_str(self.rest)
    }
}

impl<'a> Wrapped<'a> {
    /// The name as one borrowed string, when it is one (nothing added in front of it): a name
    /// left unchanged, or an unwrapped one without a retry or dead-letter prefix.
    pub fn as_borrowed(&self) -> Option<&'a str> {
        (self.prefix.is_empty() && self.namespace.is_none()).then_some(self.rest)
    }
}

/// What [`wrap`] and [`unwrap`] both look at: `None` for a name neither changes (an empty
/// name or namespace, a system resource), else its retry or dead-letter prefix, the rest, and
/// whether the rest is in `namespace` already.
fn parts<'a>(namespace: &str, name: &'a str) -> Option<(&'static str, &'a str, bool)> {
    if namespace.is_empty() || name.is_empty() || is_system(name) {
        return None;
    }
    let (prefix, rest) = split_prefix(name);
    let inside = rest
        .strip_prefix(namespace)
        .is_some_and(|r| r.starts_with(SEPARATOR));
    Some((prefix, rest, inside))
}

fn unchanged(name: &str) -> Wrapped<'_> {
    Wrapped {
        prefix: "",
        namespace: None,
        rest: name,
    }
}

/// `name` in `namespace` (Java `NamespaceUtil.wrapNamespace`): unchanged when either is empty,
/// for a system resource, or when it is in the namespace already; else the namespace goes
/// after a retry or dead-letter prefix.
pub fn wrap<'a>(namespace: &'a str, name: &'a str) -> Wrapped<'a> {
    match parts(namespace, name) {
        Some((prefix, rest, false)) => Wrapped {
            prefix,
            namespace: Some(namespace),
            rest,
        },
        _ => unchanged(name),
    }
}

/// `name` without `namespace` (Java `NamespaceUtil.withoutNamespace(name, namespace)`): a name
/// of another namespace, or of none, is unchanged; the retry or dead-letter prefix stays.
pub fn unwrap<'a>(namespace: &str, name: &'a str) -> Wrapped<'a> {
    match parts(namespace, name) {
        Some((prefix, rest, true)) => Wrapped {
            prefix,
            namespace: None,
            rest: &rest[namespace.len() + 1..],
        },
        _ => unchanged(name),
    }
}

/// Namespace v2's ext fields (Java's `NamespaceRpcHook`, `namespaceV2`): `nsd=true` and
/// `ns=<namespace>` on every request, signed with the others when there are ACL credentials;
/// names are not wrapped. The open-source broker and proxy ignore them; managed instances
/// read them. None when the namespace is `None`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct V2Fields<'a>(pub Option<&'a str>);

impl crate::wire::ExtFields for V2Fields<'_> {
    fn visit_fields<V: crate::wire::ExtVisitor + ?Sized>(&self, v: &mut V) {
        if let Some(ns) = self.0 {
            v.field("nsd", crate::wire::ExtValue::Str("true"));
            v.field("ns", crate::wire::ExtValue::Str(ns));
        }
    }
}

#[cfg(test)]
mod tests;
