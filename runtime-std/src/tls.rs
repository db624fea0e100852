//! TLS transport (rustls, ring provider) for connections to brokers running with
//! `tls.server.mode=enforcing` (or `permissive`).
//!
//! A [`TlsConfig`] holds a rustls client configuration (root certificates; optionally a
//! client certificate through [`TlsConfig::from_client_config`]) and which peers get TLS: by
//! default the brokers only, since a 5.x/4.9 NameServer usually stays plain TCP
//! ([`TlsConfig::name_server_too`] changes that). The server name checked against the
//! certificate is the host of the address (an IP address is checked against the
//! certificate's IP SANs) unless [`TlsConfig::server_name`] overrides it.
//!
//! The connection layer does the TCP connect, then [`handshake`]; a failed handshake is a
//! `TransportError::ConnectFailed` like any other failed connect (its cause, the rustls error,
//! is kept: [`crate::ConnectionError::tls`]), and the connection task
//! then runs over the TLS stream exactly as over TCP.

use std::fmt;
use std::sync::Arc;

use crate::message::ConnectionError;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tracing::debug;

/// Why a [`TlsConfig`] could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsError {
    /// The PEM text holds no certificate, or one that cannot be parsed.
    BadCertificate,
    /// The server name is not a valid DNS name or IP address.
    BadServerName,
    /// rustls refused the configuration (protocol versions, provider).
    Config(String),
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsError::BadCertificate => f.write_str("no valid PEM certificate"),
            TlsError::BadServerName => f.write_str("invalid TLS server name"),
            TlsError::Config(e) => write!(f, "TLS configuration refused: {e}"),
        }
    }
}

impl std::error::Error for TlsError {}

/// TLS settings of a producer or consumer (see the module docs).
#[derive(Clone)]
pub struct TlsConfig {
    connector: TlsConnector,
    server_name: Option<ServerName<'static>>,
    name_server_too: bool,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("server_name", &self.server_name)
            .field("name_server_too", &self.name_server_too)
            .finish_non_exhaustive()
    }
}

impl TlsConfig {
    /// Trusts the CA certificates in `pem` (one or more `BEGIN CERTIFICATE` blocks), no
    /// client certificate.
    ///
    /// # Errors
    /// [`TlsError::BadCertificate`] when `pem` holds no usable certificate.
    pub fn with_ca_pem(pem: &[u8]) -> Result<Self, TlsError> {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|_| TlsError::BadCertificate)?;
            roots.add(cert).map_err(|_| TlsError::BadCertificate)?;
        }
        if roots.is_empty() {
            return Err(TlsError::BadCertificate);
        }
        Self::with_roots(roots)
    }

    /// Trusts the certificates of `roots`, no client certificate.
    ///
    /// # Errors
    /// [`TlsError::Config`] when rustls refuses the configuration.
    pub fn with_roots(roots: RootCertStore) -> Result<Self, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cfg = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Self::from_client_config(Arc::new(cfg)))
    }

    /// Uses a complete rustls client configuration (client certificates, custom verifiers).
    pub fn from_client_config(cfg: Arc<ClientConfig>) -> Self {
        TlsConfig {
            connector: TlsConnector::from(cfg),
            server_name: None,
            name_server_too: false,
        }
    }

    /// Checks every peer's certificate against `name` instead of the host of its address.
    ///
    /// # Errors
    /// [`TlsError::BadServerName`].
    pub fn server_name(mut self, name: &str) -> Result<Self, TlsError> {
        let n = ServerName::try_from(name.to_owned()).map_err(|_| TlsError::BadServerName)?;
        self.server_name = Some(n);
        Ok(self)
    }

    /// Uses TLS to the NameServers too (default: brokers only).
    #[must_use]
    pub fn name_server_too(mut self, on: bool) -> Self {
        self.name_server_too = on;
        self
    }

    /// Whether NameServer connections use TLS.
    pub fn applies_to_name_server(&self) -> bool {
        self.name_server_too
    }

    fn name_for(&self, addr: &str) -> Option<ServerName<'static>> {
        if let Some(n) = &self.server_name {
            return Some(n.clone());
        }
        let host = match addr.rsplit_once(':') {
            Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']'),
            None => addr,
        };
        ServerName::try_from(host.to_owned()).ok()
    }
}

/// Runs the TLS handshake on a connected `tcp` to `addr`.
///
/// # Errors
/// The TLS failure (certificate not trusted, name mismatch, peer not speaking TLS) or the I/O
/// error.
pub async fn handshake(
    cfg: &TlsConfig,
    addr: &str,
    tcp: TcpStream,
) -> Result<TlsStream<TcpStream>, ConnectionError> {
    let Some(name) = cfg.name_for(addr) else {
        let e = std::io::Error::new(std::io::ErrorKind::InvalidInput, "no TLS server name");
        return Err(ConnectionError::io(addr, e));
    };
    cfg.connector.connect(name, tcp).await.map_err(|e| {
        debug!(addr, error = %e, "TLS handshake failed");
        ConnectionError::io(addr, e)
    })
}
