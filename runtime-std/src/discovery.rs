//! NameServer discovery from an HTTP endpoint (Java's `rocketmq.namesrv.domain`): a client
//! built with [`NamesrvDomain`] and no NameServer address fetches the list at its start and
//! follows it while it runs. The bytes move here (one HTTP/1.0 GET per fetch, 3 s at most);
//! what to ask, what the answer says, when to ask again and whether the list changed are
//! [`rmq_core::discovery`]'s.

use std::fmt;
use std::time::Duration;

use rmq_core::discovery::{self, DEFAULT_SUBGROUP, Discovery, Endpoint, REFRESH_PERIOD};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::{info, warn};

use crate::clock;
use rmq_core::client::Attached;

use crate::driver::Driver;

/// Where a client's NameServer list is served: `http://<domain>[:8080]/rocketmq/<subgroup>`
/// (Java's `rocketmq.namesrv.domain` and `rocketmq.namesrv.domain.subgroup`), answered with
/// `addr;addr;...`.
///
/// ```
/// use std::time::Duration;
/// use rmq_std::NamesrvDomain;
/// let d = NamesrvDomain::new("ns.example.com:8080").subgroup("unit-a").refresh(Duration::from_secs(60));
/// assert_eq!(d.subgroup, "unit-a");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NamesrvDomain {
    /// `host` (port 8080) or `host:port`.
    pub domain: String,
    /// The path's last part (default `nsaddr`).
    pub subgroup: String,
    /// How often the list is fetched again (default 2 min, at least 1 s; the first refresh
    /// comes 10 s after the start, or sooner with a shorter period).
    pub refresh: Duration,
}

impl NamesrvDomain {
    /// The list served by `domain` under the default subgroup, refreshed every 2 minutes.
    pub fn new(domain: &str) -> Self {
        NamesrvDomain {
            domain: domain.to_owned(),
            subgroup: DEFAULT_SUBGROUP.to_owned(),
            refresh: clock::to_std(REFRESH_PERIOD),
        }
    }

    /// Another subgroup.
    #[must_use]
    pub fn subgroup(mut self, subgroup: &str) -> Self {
        subgroup.clone_into(&mut self.subgroup);
        self
    }

    /// Another refresh period.
    #[must_use]
    pub fn refresh(mut self, period: Duration) -> Self {
        self.refresh = period;
        self
    }
}

/// Why the NameServer list could not be fetched.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DiscoveryError {
    /// Connecting, writing or reading failed (the I/O error).
    Io(String),
    /// No whole answer within 3 s.
    TimedOut,
    /// The answer was not HTTP 200.
    Answer(discovery::ResponseError),
    /// The answer's body named no address.
    Empty,
}

impl fmt::Display for DiscoveryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DiscoveryError::Io(e) => write!(f, "fetching the NameServer list failed: {e}"),
            DiscoveryError::TimedOut => f.write_str("fetching the NameServer list timed out"),
            DiscoveryError::Answer(e) => write!(f, "the NameServer list endpoint answered {e}"),
            DiscoveryError::Empty => f.write_str("the NameServer list endpoint sent no address"),
        }
    }
}

impl std::error::Error for DiscoveryError {}

/// Fetches the list `d` serves (the list's text).
async fn fetch(d: &NamesrvDomain) -> Result<String, DiscoveryError> {
    let e = Endpoint::new(&d.domain, &d.subgroup);
    let ask = async {
        let mut s = tokio::net::TcpStream::connect((e.host(), e.port())).await?;
        let mut req = vec![0u8; d.domain.len() + d.subgroup.len() + 96];
        let n = e
            .write_request(&mut req)
            .map_err(|_| std::io::ErrorKind::InvalidInput)?;
        s.write_all(&req[..n]).await?;
        // Up to its Content-Length, or to the end when it names none.
        let mut answer = Vec::new();
        let mut s = s.take(discovery::MAX_RESPONSE as u64);
        let mut chunk = [0u8; 1024];
        loop {
            let n = s.read(&mut chunk).await?;
            answer.extend_from_slice(&chunk[..n]);
            if n == 0 || discovery::answer_len(&answer).is_some_and(|l| answer.len() >= l) {
                break;
            }
        }
        Ok::<_, std::io::Error>(answer)
    };
    let limit = clock::to_std(discovery::FETCH_TIMEOUT);
    let answer = tokio::time::timeout(limit, ask)
        .await
        .map_err(|_| DiscoveryError::TimedOut)?
        .map_err(|e| DiscoveryError::Io(e.to_string()))?;
    let body = discovery::response_body(&answer).map_err(DiscoveryError::Answer)?;
    discovery::list_of(body)
        .map(str::to_owned)
        .ok_or(DiscoveryError::Empty)
}

/// The NameServer addresses `d` serves now (one fetch; a client built with
/// [`namesrv_domain`](crate::ProducerBuilder::namesrv_domain) fetches and follows by itself).
///
/// # Errors
/// [`DiscoveryError`].
pub async fn fetch_name_servers(d: &NamesrvDomain) -> Result<Vec<String>, DiscoveryError> {
    fetch(d).await.map(|list| split(&list))
}

fn split(list: &str) -> Vec<String> {
    discovery::addresses(list).map(str::to_owned).collect()
}

/// A discovered list to follow once the client runs ([`resolve`]).
pub(crate) struct Follow {
    domain: NamesrvDomain,
    schedule: Discovery,
}

impl Follow {
    /// Follows the list with the client's `driver`, and with its trace producer's (which
    /// asks the same NameServers for the trace topic).
    pub(crate) fn attach<C: Attached + Send + 'static>(
        self,
        driver: &Driver<C>,
        tracer: Option<&crate::trace::Tracer>,
    ) {
        if let Some(t) = tracer {
            follow(t.driver(), self.domain.clone(), self.schedule);
        }
        follow(driver, self.domain, self.schedule);
    }
}

/// A client's start: without NameServer addresses and with `domain`, the list `domain`
/// serves now goes into `addrs`; what follows it ([`Follow::attach`]).
///
/// # Errors
/// The first fetch failed (the start cannot go on without a NameServer).
pub(crate) async fn resolve(
    addrs: &mut Vec<String>,
    domain: Option<&NamesrvDomain>,
) -> Result<Option<Follow>, DiscoveryError> {
    let Some(d) = domain.filter(|_| addrs.is_empty()) else {
        return Ok(None);
    };
    let list = fetch(d).await?;
    let mut schedule = Discovery::new(clock::to_core(d.refresh));
    schedule.changed(clock::now(), &list);
    info!(domain = d.domain, list, "NameServer list fetched");
    *addrs = split(&list);
    Ok(Some(Follow {
        domain: d.clone(),
        schedule,
    }))
}

/// Follows the list `d` serves while `driver`'s client runs: fetched when `schedule` says,
/// handed to the driver when it changed; a failed fetch keeps the list (logged).
fn follow<C: Attached + Send + 'static>(
    driver: &Driver<C>,
    d: NamesrvDomain,
    mut schedule: Discovery,
) {
    let weak = driver.downgrade();
    tokio::spawn(async move {
        while let Some(next) = schedule.next_fetch() {
            tokio::time::sleep_until(clock::to_tokio(next)).await;
            if weak.upgrade().is_none() {
                return;
            }
            let fetched = fetch(&d).await;
            let Some(driver) = weak.upgrade() else { return };
            match fetched {
                Ok(list) if schedule.changed(clock::now(), &list) => {
                    info!(domain = d.domain, list, "NameServer list changed");
                    driver.set_name_servers(split(&list));
                }
                Ok(_) => {}
                Err(e) => {
                    schedule.fetched(clock::now());
                    warn!(domain = d.domain, error = %e, "NameServer list not fetched; kept");
                }
            }
        }
    });
}
