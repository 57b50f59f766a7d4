//! TLS for PostgreSQL sessions: rustls (ring), with libpq's `sslmode` meanings.
//!
//! * `disable`: plain text. `prefer` (the default, as in libpq): TLS if the server accepts the
//!   SSLRequest, plain text if it declines; the certificate is not checked. `require`: TLS or no
//!   session; the certificate is checked against `sslrootcert` when one is given (as libpq does when
//!   a root certificate file exists), not checked otherwise.
//! * `verify-ca`: the chain must lead to a CA of `sslrootcert`, be in its validity period; the host
//!   name is not checked. `verify-full`: that, and the certificate must be valid for the host name
//!   (or IP address) of the URL.
//! * `sslcert` + `sslkey`: a client certificate for servers that ask for one (`hostssl … cert`).
//!
//! Where we differ from libpq: `sslrootcert`, `sslcert` and `sslkey` have no default files (libpq
//! looks in `~/.postgresql/`), and `sslrootcert=system` is not supported; verify-ca and verify-full
//! need `sslrootcert`. Under `prefer`, a TLS handshake that fails is an error (libpq would try again
//! in plain text). No certificate revocation lists (`sslcrl`). TLS channel binding is not offered,
//! so SCRAM uses `SCRAM-SHA-256` (not `-PLUS`) and `channel_binding=require` fails.

use leasehold_core::config::{PostgresConfig, PostgresSslMode};
use leasehold_core::{Error, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, TlsConnect};

/// What every session's TLS uses: built once per backend (certificates read at connect).
#[derive(Clone)]
pub(crate) struct Tls {
    config: Option<Arc<ClientConfig>>,
    pub mode: PostgresSslMode,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("mode", &self.mode).finish()
    }
}

impl Tls {
    pub fn new(pg: &PostgresConfig) -> Result<Tls> {
        let mode = pg.ssl_mode;
        if mode == PostgresSslMode::Disable {
            return Ok(Tls { config: None, mode });
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Internal(format!("rustls: {e}")))?;
        let verify = match (mode, &pg.ssl_root_cert) {
            (PostgresSslMode::VerifyFull | PostgresSslMode::VerifyCa, None) => {
                return Err(Error::invalid(
                    "sslmode=verify-ca and verify-full need sslrootcert=",
                ))
            }
            (_, Some(path)) => Some(path),
            (_, None) => None,
        };
        // The handshake's signatures are checked in every mode, with the provider's algorithms.
        let signatures = provider.signature_verification_algorithms;
        let ca = match verify {
            Some(path) => {
                let mut roots = RootCertStore::empty();
                for cert in read_certs(path, "sslrootcert")? {
                    roots.add(cert).map_err(|e| {
                        Error::invalid(format!(
                            "sslrootcert {}: not a usable CA certificate: {e}",
                            path.display()
                        ))
                    })?;
                }
                let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                    .build()
                    .map_err(|e| Error::invalid(format!("sslrootcert {}: {e}", path.display())))?;
                Some(webpki)
            }
            None => None,
        };
        let builder = builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Verifier {
                ca,
                // `require` with a root certificate checks like verify-ca, as libpq does.
                check_name: mode == PostgresSslMode::VerifyFull,
                signatures,
            }));
        let config = match (&pg.ssl_cert, &pg.ssl_key) {
            (Some(cert), Some(key)) => {
                let certs = read_certs(cert, "sslcert")?;
                let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                    Error::invalid(format!(
                        "sslkey {}: no PEM private key ({e})",
                        key.display()
                    ))
                })?;
                builder.with_client_auth_cert(certs, key).map_err(|e| {
                    Error::invalid(format!(
                        "sslcert {} and sslkey do not make a client certificate: {e}",
                        cert.display()
                    ))
                })?
            }
            _ => builder.with_no_client_auth(),
        };
        Ok(Tls {
            config: Some(Arc::new(config)),
            mode,
        })
    }

    /// The connector for one connection to `host` (a name or an IP address, as the URL gives it).
    pub fn connector(&self, host: &str) -> std::result::Result<Connector, String> {
        let Some(config) = &self.config else {
            return Ok(Connector(None));
        };
        let name = ServerName::try_from(host.trim_matches(|c| c == '[' || c == ']').to_owned())
            .map_err(|_| format!("`{host}` is not a host name TLS can check"))?;
        Ok(Connector(Some((config.clone(), name))))
    }
}

fn read_certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| Error::invalid(format!("{what} {}: cannot read it ({e})", path.display())))?
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| Error::invalid(format!("{what} {}: bad PEM ({e})", path.display())))?;
    if certs.is_empty() {
        return Err(Error::invalid(format!(
            "{what} {}: no PEM certificate in it",
            path.display()
        )));
    }
    Ok(certs)
}

/// The certificate check of the sslmode: against `sslrootcert` (`ca`), with the host-name check only
/// for verify-full; or, for `prefer` and `require` without `sslrootcert` (`ca` is `None`), none:
/// encrypted, the certificate not checked (libpq's meaning). The handshake's signatures are checked
/// either way, with the provider's algorithms (what [`WebPkiServerVerifier`] itself uses): one type
/// for both, so the signature checks are written once.
#[derive(Debug)]
struct Verifier {
    ca: Option<Arc<WebPkiServerVerifier>>,
    check_name: bool,
    signatures: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let Some(webpki) = &self.ca else {
            return Ok(ServerCertVerified::assertion());
        };
        match webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.signatures)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.signatures)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.signatures.supported_schemes()
    }
}

/// tokio-postgres's connector for one connection; `None` for `sslmode=disable`.
pub(crate) struct Connector(Option<(Arc<ClientConfig>, ServerName<'static>)>);

impl Connector {
    pub fn plain() -> Connector {
        Connector(None)
    }
}

impl<S> TlsConnect<S> for Connector
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = TlsStream<S>;
    type Error = TlsError;
    type Future = Pin<Box<dyn Future<Output = std::result::Result<TlsStream<S>, TlsError>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let Some((config, name)) = self.0 else {
                return Err(TlsError("TLS is disabled (sslmode=disable)".into()));
            };
            let shown = match &name {
                ServerName::DnsName(d) => d.as_ref().to_owned(),
                ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
                _ => "the server".to_owned(),
            };
            tokio_rustls::TlsConnector::from(config)
                .connect(name, stream)
                .await
                .map(TlsStream)
                .map_err(|e| TlsError(explain(&e, &shown)))
        })
    }
}

/// A TLS handshake failure as a sentence that says which check failed.
fn explain(e: &std::io::Error, host: &str) -> String {
    let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) else {
        return format!("TLS handshake with {host} failed: {e}");
    };
    let why = match tls {
        rustls::Error::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer => {
                "the server's certificate is not signed by a CA of sslrootcert (unknown issuer)"
                    .to_owned()
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "the server's certificate has expired".to_owned()
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "the server's certificate is not valid yet".to_owned()
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                format!(
                    "the server's certificate is not valid for the host name {host} \
                     (sslmode=verify-full checks it)"
                )
            }
            CertificateError::Revoked => "the server's certificate is revoked".to_owned(),
            other => format!("the server's certificate was refused: {other:?}"),
        },
        rustls::Error::AlertReceived(alert) => {
            format!("the server ended the handshake ({alert:?}): does it want a client certificate (sslcert, sslkey)?")
        }
        other => other.to_string(),
    };
    format!("TLS handshake with {host} failed: {why}")
}

#[derive(Debug)]
pub(crate) struct TlsError(String);

impl std::fmt::Display for TlsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsError {}

pub(crate) struct TlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> tokio_postgres::tls::TlsStream for TlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
