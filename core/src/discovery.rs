//! NameServer discovery from an HTTP endpoint (Java's `DefaultTopAddressing`, used when a client
//! has no NameServer address; docs/protocol/DISCOVERY.md): where the address list is served,
//! the request and the answer's bytes, what the list says, when to fetch it again, and whether
//! it changed. The runtime moves the bytes (one HTTP/1.0 GET per fetch) and hands a changed
//! list to its session ([`crate::session::Session::set_name_servers`]).
//!
//! ```
//! use rmq_core::discovery::{Discovery, Endpoint, addresses, list_of, response_body};
//! use rmq_core::time::Instant;
//! let e = Endpoint::new("ns.example.com", "nsaddr");
//! assert_eq!((e.host(), e.port()), ("ns.example.com", 8080));
//! let mut req = [0u8; 128];
//! let n = e.write_request(&mut req).unwrap();
//! assert!(req[..n].starts_with(b"GET /rocketmq/nsaddr HTTP/1.0\r\nHost: ns.example.com:8080\r\n"));
//!
//! let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 28\r\n\r\n10.0.0.1:9876;10.0.0.2:9876\n";
//! let list = list_of(response_body(answer).unwrap()).unwrap();
//! assert_eq!(addresses(list).collect::<Vec<_>>(), ["10.0.0.1:9876", "10.0.0.2:9876"]);
//!
//! let mut d = Discovery::default();
//! let t0 = Instant::from_millis(0);
//! assert!(d.changed(t0, list)); // the first list
//! assert!(!d.changed(t0, list)); // the same again
//! ```

use core::fmt::Write as _;

use crate::time::{Duration, Instant};

/// Java's default domain (`MixAll.DEFAULT_NAMESRV_ADDR_LOOKUP`, system property
/// `rocketmq.namesrv.domain`).
pub const DEFAULT_DOMAIN: &str = "jmenv.tbsite.net";
/// Java's default subgroup (system property `rocketmq.namesrv.domain.subgroup`).
pub const DEFAULT_SUBGROUP: &str = "nsaddr";
/// The port of a domain given without one (`MixAll.getWSAddr`).
pub const DEFAULT_PORT: u16 = 8080;
/// How long one fetch may take (Java's `fetchNSAddr` timeout, 3 s).
pub const FETCH_TIMEOUT: Duration = Duration::from_millis(3_000);
/// The first scheduled fetch after the start's own (Java: 10 s).
pub const FIRST_REFRESH: Duration = Duration::from_millis(10_000);
/// The refresh period after it (Java: 2 min).
pub const REFRESH_PERIOD: Duration = Duration::from_millis(120_000);
/// The shortest refresh period [`Discovery`] keeps (a shorter one is raised to it).
pub const MIN_PERIOD: Duration = Duration::from_millis(1_000);
/// The largest answer a runtime needs to read.
pub const MAX_RESPONSE: usize = 64 * 1024;

/// Where the list is served: `http://<domain>[:8080]/rocketmq/<subgroup>`; a domain with a
/// `:port` keeps its port (`MixAll.getWSAddr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint<'a> {
    domain: &'a str,
    subgroup: &'a str,
}

impl<'a> Endpoint<'a> {
    /// The endpoint of `domain` (`host` or `host:port`) and `subgroup`.
    pub const fn new(domain: &'a str, subgroup: &'a str) -> Self {
        Endpoint { domain, subgroup }
    }

    /// The host to connect to.
    pub fn host(&self) -> &'a str {
        self.split().0
    }

    /// The port (8080 unless the domain names one; a port that does not parse is 8080 too).
    pub fn port(&self) -> u16 {
        self.split().1
    }

    fn split(&self) -> (&'a str, u16) {
        match self.domain.rsplit_once(':') {
            // Java: a ':' after the first character means the domain carries its port.
            Some((host, port)) if !host.is_empty() => (host, port.parse().unwrap_or(DEFAULT_PORT)),
            _ => (self.domain, DEFAULT_PORT),
        }
    }

    /// Writes the GET request (HTTP/1.0: the answer ends with the connection, never chunked)
    /// into `out`; its length.
    ///
    /// # Errors
    /// `out` is too small.
    pub fn write_request(&self, out: &mut [u8]) -> Result<usize, crate::json::BufferTooSmall> {
        let mut w = Cursor { buf: out, len: 0 };
        write!(
            w,
            "GET /rocketmq/{} HTTP/1.0\r\nHost: {}:{}\r\nConnection: close\r\n\r\n",
            self.subgroup,
            self.host(),
            self.port()
        )
        .map_err(|_| crate::json::BufferTooSmall)?;
        Ok(w.len)
    }
}

/// What is wrong with an HTTP answer ([`response_body`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseError {
    /// The bytes are not an HTTP/1.x answer with a header end.
    Malformed,
    /// The server answered this status, not 200 (Java logs it and keeps its list).
    Status(u16),
}

impl core::fmt::Display for ResponseError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ResponseError::Malformed => f.write_str("not an HTTP answer"),
            ResponseError::Status(s) => write!(f, "HTTP status {s}"),
        }
    }
}

/// Where the head of an answer ends (its blank line), once it is in.
fn head_end(answer: &[u8]) -> Option<usize> {
    answer.windows(4).position(|w| w == b"\r\n\r\n")
}

/// The `Content-Length` a head names, if any.
fn content_length(head: &str) -> Option<usize> {
    head.lines().skip(1).find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse().ok())?
    })
}

/// The length of the whole answer whose first bytes are `answer`, once its head is in and
/// names a `Content-Length` (without one, the answer ends when the server closes).
pub fn answer_len(answer: &[u8]) -> Option<usize> {
    let end = head_end(answer)?;
    let head = core::str::from_utf8(&answer[..end]).ok()?;
    content_length(head)?.checked_add(end + 4)
}

/// The body of a whole HTTP answer (status 200 only; `Content-Length` bytes when it names
/// them).
///
/// # Errors
/// [`ResponseError`].
pub fn response_body(answer: &[u8]) -> Result<&[u8], ResponseError> {
    let end = head_end(answer).ok_or(ResponseError::Malformed)?;
    let head = core::str::from_utf8(&answer[..end]).map_err(|_| ResponseError::Malformed)?;
    let status_line = head.lines().next().unwrap_or("");
    let mut parts = status_line.split(' ');
    let (Some(version), Some(code)) = (parts.next(), parts.next()) else {
        return Err(ResponseError::Malformed);
    };
    if !version.starts_with("HTTP/1.") {
        return Err(ResponseError::Malformed);
    }
    let body = &answer[end + 4..];
    let len = content_length(head).unwrap_or(body.len()).min(body.len());
    match code.parse::<u16>() {
        Ok(200) => Ok(&body[..len]),
        Ok(s) => Err(ResponseError::Status(s)),
        Err(_) => Err(ResponseError::Malformed),
    }
}

/// The address list a body says (Java's `clearNewLine`: trimmed, up to the first line end);
/// `None` when it is blank or not UTF-8 (Java keeps its list then).
pub fn list_of(body: &[u8]) -> Option<&str> {
    let s = core::str::from_utf8(body).ok()?.trim();
    let s = s.split(['\r', '\n']).next().unwrap_or("").trim();
    (!s.is_empty()).then_some(s)
}

/// The addresses of a list (`;`-separated, as `updateNameServerAddressList` splits it), blanks
/// left out.
pub fn addresses(list: &str) -> impl Iterator<Item = &str> {
    list.split(';').map(str::trim).filter(|a| !a.is_empty())
}

/// When to fetch the list and whether a fetched one changed. The start fetches at once; the
/// next fetch is [`FIRST_REFRESH`] later, then every refresh period. Only a list that adds or
/// removes an address changes the client, as in Java (whose remoting client ignores a new
/// order); compared by a 64-bit hash of the set, which needs no copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Discovery {
    period: Duration,
    next: Option<Instant>,
    fetches: u32,
    taken: Option<u64>,
}

impl Default for Discovery {
    fn default() -> Self {
        Discovery::new(REFRESH_PERIOD)
    }
}

impl Discovery {
    /// Fetching every `period` (at least [`MIN_PERIOD`]) after the first refresh (Java:
    /// [`REFRESH_PERIOD`]).
    pub const fn new(period: Duration) -> Self {
        let period = if period.millis() < MIN_PERIOD.millis() {
            MIN_PERIOD
        } else {
            period
        };
        Discovery {
            period,
            next: None,
            fetches: 0,
            taken: None,
        }
    }

    /// When the next fetch is due (`None` before the first: at once).
    pub fn next_fetch(&self) -> Option<Instant> {
        self.next
    }

    /// A fetch ended at `now` (answered or not): the next is due [`FIRST_REFRESH`] (or the
    /// period, if shorter) after the first, the period after the others.
    pub fn fetched(&mut self, now: Instant) {
        let wait = if self.fetches == 0 {
            FIRST_REFRESH.min(self.period)
        } else {
            self.period
        };
        self.fetches = self.fetches.saturating_add(1);
        self.next = Some(now.saturating_add(wait));
    }

    /// Whether `list` (from a fetch ended at `now`) differs from the last list taken; a
    /// changed list is taken. Also counts the fetch ([`Discovery::fetched`]).
    pub fn changed(&mut self, now: Instant, list: &str) -> bool {
        self.fetched(now);
        let h = hash(list);
        let changed = self.taken != Some(h);
        self.taken = Some(h);
        changed
    }
}

/// The list as a set (Java's `NettyRemotingClient.updateNameServerAddressList` updates only
/// when an address was added or removed): the sum of each address's FNV-1a hash, and the count.
fn hash(list: &str) -> u64 {
    let (mut sum, mut n) = (0u64, 0u64);
    for a in addresses(list) {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in a.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        sum = sum.wrapping_add(h);
        n += 1;
    }
    sum ^ n.rotate_left(56)
}

struct Cursor<'b> {
    buf: &'b mut [u8],
    len: usize,
}

impl core::fmt::Write for Cursor<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let end = self.len.checked_add(s.len()).ok_or(core::fmt::Error)?;
        let dst = self.buf.get_mut(self.len..end).ok_or(core::fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
