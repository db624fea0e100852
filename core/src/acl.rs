//! ACL 1.0 request signing (`AclClientRPCHook`, the same in 4.9.x and 5.x; docs/protocol/WIRE.md §14).
//!
//! Before a request is sent, Java adds `AccessKey` (and `SecurityToken` when configured) to the
//! ext fields, flattens the custom header into them, sorts every ext field by key (Java
//! `String` order), concatenates the **values** (not the keys) of all but `Signature`, appends
//! the body, and adds `Signature = Base64(HMAC-SHA1(secretKey, that content))`.
//!
//! [`SignedFields`] does the same without allocating: it streams the values into the HMAC in
//! key order by selecting the next key on each pass over the fields (ext-field sets are small,
//! so `O(n²)` visits cost less than any buffer), then appends `AccessKey`, `SecurityToken` and
//! `Signature` after the original fields when encoded.
//!
//! ```
//! use rmq_core::acl::{Credentials, SignedFields};
//! use rmq_core::wire::{CommandHeader, CommandRepr, Frame, RequestCode, SerializeType, version};
//! use rmq_core::wire::headers::GetRouteInfoRequestHeader;
//!
//! let creds = Credentials { access_key: "rocketmq2", secret_key: "12345678", security_token: None };
//! let hdr = GetRouteInfoRequestHeader { topic: "TopicTest", accept_standard_json_only: None };
//! let signed = SignedFields::sign(&creds, &hdr, b"")?;
//! let cmd = CommandRepr::request(RequestCode::GET_ROUTEINFO_BY_TOPIC, 1, version::V5_3_3, Some(&signed));
//! let mut buf = [0u8; 512];
//! let n = cmd.emit_frame_prefix_and_header(SerializeType::JSON, 0, &mut buf)?;
//! let frame = Frame::new_checked(&buf[..n])?;
//! let parsed = CommandHeader::parse(&frame)?;
//! assert!(parsed.get("AccessKey").unwrap().eq_str("rocketmq2"));
//! assert_eq!(parsed.get("Signature").unwrap().eq_str(signed.signature()), true);
//! # Ok::<(), Box<dyn core::error::Error>>(())
//! ```

use core::cmp::Ordering;
use core::fmt;

use hmac::{Hmac, KeyInit, Mac};
use sha1::Sha1;

use crate::json::i64_dec_len;
use crate::wire::{CommandRepr, EncodeError, ExtFields, ExtValue, ExtVisitor, SerializeType};

/// Ext-field key of the access key.
pub const ACCESS_KEY: &str = "AccessKey";
/// Ext-field key of the signature.
pub const SIGNATURE: &str = "Signature";
/// Ext-field key of the optional security token.
pub const SECURITY_TOKEN: &str = "SecurityToken";
/// Longest ext-field key that can be signed (keys are copied to order them).
pub const MAX_KEY_LEN: usize = 64;
/// Length of a Base64-encoded HMAC-SHA1.
pub const SIGNATURE_LEN: usize = 28;

/// ACL credentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Credentials<'a> {
    /// `AccessKey`.
    pub access_key: &'a str,
    /// The secret key (never sent).
    pub secret_key: &'a str,
    /// Optional `SecurityToken`.
    pub security_token: Option<&'a str>,
}

/// Signing failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum AclError {
    /// An ext-field key is longer than [`MAX_KEY_LEN`].
    KeyTooLong,
    /// The access key is empty.
    EmptyAccessKey,
    /// The HMAC implementation rejected the secret key (cannot happen for HMAC-SHA1).
    InvalidSecretKey,
}

impl fmt::Display for AclError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AclError::KeyTooLong => write!(f, "ext-field key longer than {MAX_KEY_LEN} bytes"),
            AclError::EmptyAccessKey => f.write_str("empty ACL access key"),
            AclError::InvalidSecretKey => f.write_str("invalid ACL secret key"),
        }
    }
}

impl core::error::Error for AclError {}

/// A custom header's fields plus the ACL fields, ready to encode.
#[derive(Clone, Copy, Debug)]
pub struct SignedFields<'a, E> {
    inner: E,
    access_key: &'a str,
    security_token: Option<&'a str>,
    signature: [u8; SIGNATURE_LEN],
}

struct AclExtras<'a> {
    access_key: &'a str,
    security_token: Option<&'a str>,
}

impl ExtFields for AclExtras<'_> {
    fn visit_fields<V: ExtVisitor + ?Sized>(&self, v: &mut V) {
        v.field(ACCESS_KEY, ExtValue::Str(self.access_key));
        if let Some(t) = self.security_token {
            v.field(SECURITY_TOKEN, ExtValue::Str(t));
        }
    }
}

/// Java `String.compareTo` (UTF-16 code units).
fn java_cmp(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// Finds the smallest key strictly greater than `after` (or the smallest of all).
struct NextKey<'p> {
    after: Option<&'p str>,
    best: heapless::String<MAX_KEY_LEN>,
    found: bool,
    too_long: bool,
}

impl ExtVisitor for NextKey<'_> {
    fn field(&mut self, key: &str, _value: ExtValue<'_>) {
        if key == SIGNATURE {
            return;
        }
        if let Some(after) = self.after
            && java_cmp(key, after) != Ordering::Greater
        {
            return;
        }
        if self.found && java_cmp(key, &self.best) != Ordering::Less {
            return;
        }
        self.best.clear();
        if self.best.push_str(key).is_err() {
            self.too_long = true;
            return;
        }
        self.found = true;
    }
}

/// Finds the **last** field named `key` (a later put wins, as in Java's map).
struct FeedValue<'k> {
    key: &'k str,
    seen: usize,
    last: Option<(usize, ValueCopy)>,
}

/// A value kept between visits: strings are re-found by their occurrence index on a second
/// visit, so only scalars are stored.
#[derive(Clone, Copy)]
enum ValueCopy {
    Int(i64),
    Bool(bool),
    Str,
}

impl ExtVisitor for FeedValue<'_> {
    fn field(&mut self, key: &str, value: ExtValue<'_>) {
        if key != self.key {
            return;
        }
        let v = match value {
            ExtValue::Str(_) => ValueCopy::Str,
            ExtValue::Int(i) => ValueCopy::Int(i),
            ExtValue::Bool(b) => ValueCopy::Bool(b),
        };
        self.last = Some((self.seen, v));
        self.seen += 1;
    }
}

struct FeedString<'k, 'm> {
    key: &'k str,
    index: usize,
    seen: usize,
    mac: &'m mut Hmac<Sha1>,
}

impl ExtVisitor for FeedString<'_, '_> {
    fn field(&mut self, key: &str, value: ExtValue<'_>) {
        if key != self.key {
            return;
        }
        if self.seen == self.index
            && let ExtValue::Str(s) = value
        {
            self.mac.update(s.as_bytes());
        }
        self.seen += 1;
    }
}

fn feed_int(mac: &mut Hmac<Sha1>, v: i64) {
    let mut buf = [0u8; 20];
    let n = i64_dec_len(v);
    let mut x = v.unsigned_abs();
    let mut i = n;
    while i > 0 {
        i -= 1;
        if let Some(slot) = buf.get_mut(i) {
            *slot = b'0' + (x % 10) as u8;
        }
        x /= 10;
    }
    if v < 0
        && let Some(first) = buf.first_mut()
    {
        *first = b'-';
    }
    mac.update(buf.get(..n).unwrap_or(&[]));
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_20(input: &[u8; 20]) -> [u8; SIGNATURE_LEN] {
    let mut out = [b'='; SIGNATURE_LEN];
    let mut o = 0;
    for chunk in input.chunks(3) {
        let b0 = chunk.first().copied().unwrap_or(0) as u32;
        let b1 = chunk.get(1).copied().unwrap_or(0) as u32;
        let b2 = chunk.get(2).copied().unwrap_or(0) as u32;
        let n = (b0 << 16) | (b1 << 8) | b2;
        let chars = chunk.len() + 1;
        for k in 0..4 {
            if k < chars
                && let Some(slot) = out.get_mut(o + k)
            {
                *slot = B64[((n >> (18 - 6 * k)) & 63) as usize];
            }
        }
        o += 4;
    }
    out
}

/// Why a request's header could not be written ([`emit_request`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RequestError {
    /// The credentials could not sign it.
    Acl(AclError),
    /// It does not fit the buffer or the protocol's limits.
    Encode(EncodeError),
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::Acl(e) => write!(f, "cannot sign the request: {e}"),
            RequestError::Encode(e) => write!(f, "cannot encode the request: {e}"),
        }
    }
}

impl core::error::Error for RequestError {}

/// Writes a request's frame prefix and header into `head`: `repr` (whose `ext` is ignored)
/// with `ext` as its custom header, signed over `body` when `creds` are given (ACL 1.0). The
/// frame counts `body_len` body bytes after the header. Every request this client writes goes
/// through here: the session's and an operator's call
/// ([`ops`](crate::ops)).
///
/// # Errors
/// [`RequestError`].
pub fn emit_request<E: ExtFields>(
    repr: &CommandRepr<'_, ()>,
    ext: E,
    creds: Option<&Credentials<'_>>,
    ty: SerializeType,
    (body, body_len): (&[u8], usize),
    head: &mut [u8],
) -> Result<usize, RequestError> {
    fn with<'r, X>(repr: &CommandRepr<'r, ()>, ext: X) -> CommandRepr<'r, X> {
        CommandRepr {
            code: repr.code,
            language: repr.language,
            version: repr.version,
            opaque: repr.opaque,
            flag: repr.flag,
            remark: repr.remark,
            ext: Some(ext),
        }
    }
    match creds {
        None => with(repr, ext).emit_frame_prefix_and_header(ty, body_len, head),
        Some(creds) => {
            let signed = SignedFields::sign(creds, ext, body).map_err(RequestError::Acl)?;
            with(repr, signed).emit_frame_prefix_and_header(ty, body_len, head)
        }
    }
    .map_err(RequestError::Encode)
}

impl<'a, E: ExtFields> SignedFields<'a, E> {
    /// Signs `fields` (the request's custom header, plus any other ext fields) and `body` with
    /// `creds`.
    ///
    /// # Errors
    /// [`AclError::KeyTooLong`] for a key over [`MAX_KEY_LEN`] bytes,
    /// [`AclError::EmptyAccessKey`].
    pub fn sign(creds: &Credentials<'a>, fields: E, body: &[u8]) -> Result<Self, AclError> {
        if creds.access_key.is_empty() {
            return Err(AclError::EmptyAccessKey);
        }
        let extras = AclExtras {
            access_key: creds.access_key,
            security_token: creds.security_token,
        };
        let all = crate::wire::Chain(&fields, &extras);
        // HMAC accepts keys of any length, so this never fails in practice.
        let mut mac = <Hmac<Sha1> as KeyInit>::new_from_slice(creds.secret_key.as_bytes())
            .map_err(|_| AclError::InvalidSecretKey)?;
        let mut last: heapless::String<MAX_KEY_LEN> = heapless::String::new();
        let mut have_last = false;
        loop {
            let mut next = NextKey {
                after: have_last.then_some(last.as_str()),
                best: heapless::String::new(),
                found: false,
                too_long: false,
            };
            all.visit_fields(&mut next);
            if next.too_long {
                return Err(AclError::KeyTooLong);
            }
            if !next.found {
                break;
            }
            let mut feed = FeedValue {
                key: &next.best,
                seen: 0,
                last: None,
            };
            all.visit_fields(&mut feed);
            match feed.last {
                Some((_, ValueCopy::Int(i))) => feed_int(&mut mac, i),
                Some((_, ValueCopy::Bool(b))) => mac.update(if b { b"true" } else { b"false" }),
                Some((index, ValueCopy::Str)) => {
                    let mut s = FeedString {
                        key: &next.best,
                        index,
                        seen: 0,
                        mac: &mut mac,
                    };
                    all.visit_fields(&mut s);
                }
                None => {}
            }
            last = next.best;
            have_last = true;
        }
        mac.update(body);
        let digest: [u8; 20] = mac.finalize().into_bytes().into();
        Ok(SignedFields {
            inner: fields,
            access_key: creds.access_key,
            security_token: creds.security_token,
            signature: base64_20(&digest),
        })
    }

    /// The Base64 signature.
    pub fn signature(&self) -> &str {
        core::str::from_utf8(&self.signature).unwrap_or("")
    }
}

impl<E: ExtFields> ExtFields for SignedFields<'_, E> {
    fn visit_fields<V: ExtVisitor + ?Sized>(&self, v: &mut V) {
        self.inner.visit_fields(v);
        v.field(ACCESS_KEY, ExtValue::Str(self.access_key));
        if let Some(t) = self.security_token {
            v.field(SECURITY_TOKEN, ExtValue::Str(t));
        }
        v.field(SIGNATURE, ExtValue::Str(self.signature()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(secret: &str, pairs: &[(&str, &str)], body: &[u8]) -> std::string::String {
        // Straightforward reimplementation with std collections: sort, concat values, HMAC.
        let mut sorted: std::vec::Vec<(&str, &str)> = pairs.to_vec();
        sorted.sort_by(|a, b| java_cmp(a.0, b.0));
        let mut content = std::vec::Vec::new();
        for (k, v) in sorted {
            if k != SIGNATURE {
                content.extend_from_slice(v.as_bytes());
            }
        }
        content.extend_from_slice(body);
        let mut mac = <Hmac<Sha1> as KeyInit>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(&content);
        let d: [u8; 20] = mac.finalize().into_bytes().into();
        std::string::String::from_utf8(base64_20(&d).to_vec()).unwrap()
    }

    #[test]
    fn base64_matches_rfc4648() {
        // RFC 3174 test 1: SHA1("abc") = A9993E36 4706816A BA3E2571 7850C26C 9CD0D89D,
        // whose Base64 is qZk+NkcGgWq6PiVxeFDCbJzQ2J0=.
        let d = [
            0xA9, 0x99, 0x3E, 0x36, 0x47, 0x06, 0x81, 0x6A, 0xBA, 0x3E, 0x25, 0x71, 0x78, 0x50,
            0xC2, 0x6C, 0x9C, 0xD0, 0xD8, 0x9D,
        ];
        assert_eq!(&base64_20(&d), b"qZk+NkcGgWq6PiVxeFDCbJzQ2J0=");
    }

    #[test]
    fn hmac_sha1_rfc2202_vector() {
        // RFC 2202 test case 2: key "Jefe", data "what do ya want for nothing?".
        let mut mac = <Hmac<Sha1> as KeyInit>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        let d: [u8; 20] = mac.finalize().into_bytes().into();
        assert_eq!(
            d,
            [
                0xef, 0xfc, 0xdf, 0x6a, 0xe5, 0xeb, 0x2f, 0xa2, 0xd2, 0x74, 0x16, 0xd5, 0xf1, 0x84,
                0xdf, 0x9c, 0x25, 0x9a, 0x7c, 0x79
            ]
        );
    }

    #[test]
    fn signs_sorted_values_then_body() {
        let creds = Credentials {
            access_key: "ak",
            secret_key: "sk",
            security_token: Some("tok"),
        };
        let fields: &[(&str, &str)] = &[("topic", "T"), ("b", "2"), ("a", "1")];
        let s = SignedFields::sign(&creds, fields, b"body").unwrap();
        let want = reference(
            "sk",
            &[
                ("topic", "T"),
                ("b", "2"),
                ("a", "1"),
                (ACCESS_KEY, "ak"),
                (SECURITY_TOKEN, "tok"),
            ],
            b"body",
        );
        assert_eq!(s.signature(), want);
        // Content order: AccessKey, SecurityToken (upper case sorts first), a, b, topic.
        let mut mac = <Hmac<Sha1> as KeyInit>::new_from_slice(b"sk").unwrap();
        mac.update(b"aktok12Tbody");
        let d: [u8; 20] = mac.finalize().into_bytes().into();
        assert_eq!(s.signature().as_bytes(), &base64_20(&d));
    }

    #[test]
    fn integer_and_bool_values_are_decimal_text() {
        let creds = Credentials {
            access_key: "k",
            secret_key: "s",
            security_token: None,
        };
        let hdr = crate::wire::headers::GetRouteInfoRequestHeader {
            topic: "T",
            accept_standard_json_only: Some(true),
        };
        let s = SignedFields::sign(&creds, &hdr, b"").unwrap();
        let want = reference(
            "s",
            &[
                ("topic", "T"),
                ("acceptStandardJsonOnly", "true"),
                (ACCESS_KEY, "k"),
            ],
            b"",
        );
        assert_eq!(s.signature(), want);
        let mut mac = <Hmac<Sha1> as KeyInit>::new_from_slice(b"s").unwrap();
        feed_int(&mut mac, -1234567890123);
        let mut mac2 = <Hmac<Sha1> as KeyInit>::new_from_slice(b"s").unwrap();
        mac2.update(b"-1234567890123");
        assert_eq!(mac.finalize().into_bytes(), mac2.finalize().into_bytes());
    }

    #[test]
    fn errors_are_typed() {
        let long = "k".repeat(MAX_KEY_LEN + 1);
        let fields: &[(&str, &str)] = &[(long.as_str(), "v")];
        let creds = Credentials {
            access_key: "a",
            secret_key: "s",
            security_token: None,
        };
        assert_eq!(
            SignedFields::sign(&creds, fields, b"").unwrap_err(),
            AclError::KeyTooLong
        );
        let creds = Credentials {
            access_key: "",
            ..creds
        };
        assert_eq!(
            SignedFields::sign(&creds, &[][..] as &[(&str, &str)], b"").unwrap_err(),
            AclError::EmptyAccessKey
        );
    }

    proptest::proptest! {
        #[test]
        fn matches_reference(pairs in proptest::collection::btree_map("[A-Za-z]{1,12}", "[ -~]{0,20}", 0..12),
                             body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let pairs: std::vec::Vec<(&str, &str)> = pairs.iter()
                .filter(|(k, _)| *k != ACCESS_KEY && *k != SIGNATURE && *k != SECURITY_TOKEN)
                .map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let creds = Credentials { access_key: "AK", secret_key: "secret", security_token: None };
            let s = SignedFields::sign(&creds, &pairs[..], &body).unwrap();
            let mut all = pairs.clone();
            all.push((ACCESS_KEY, "AK"));
            proptest::prop_assert_eq!(s.signature(), reference("secret", &all, &body));
        }
    }
}
