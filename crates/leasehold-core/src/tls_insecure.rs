//! `tls_insecure=true`, for the backends that speak TLS through rustls themselves (etcd's gateway
//! and watches, Redis): one certificate verifier that accepts every certificate and every
//! handshake signature, so the insecure mode means the same thing everywhere. Behind the `tls`
//! feature, so core pulls in rustls only for the backends that already have it.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// Accepts every certificate (each backend says so in its log): encrypted, nothing verified.
#[derive(Debug)]
pub struct NoVerification {
    /// The signature schemes offered to the server: the provider's own.
    supported: WebPkiSupportedAlgorithms,
}

impl NoVerification {
    pub fn new(supported: WebPkiSupportedAlgorithms) -> NoVerification {
        NoVerification { supported }
    }
}

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.supported.supported_schemes()
    }
}
