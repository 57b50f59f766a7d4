//! `tls_insecure=true`, for the backends that speak TLS through rustls themselves (etcd's gateway
//! and watches, Redis): one certificate verifier that accepts every certificate, so the insecure
//! mode means the same thing everywhere. The handshake's signatures are still checked, against the
//! certificate the server sent, as PostgreSQL's `sslmode=require` does (libpq's meaning): the
//! connection is encrypted to whoever holds that certificate's key, whoever that is. Behind the
//! `tls` feature, so core pulls in rustls only for the backends that already have it.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// Accepts every certificate (each backend says so in its log): encrypted, the server not verified.
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
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.supported)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.supported)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.supported.supported_schemes()
    }
}
