//! TLS for `https://` targets: rustls (a maintained TLS stack in Rust, with ring's
//! primitives: no OpenSSL to build against), set up once per node.
//!
//! Sessions are resumed on new connections (rustls's in-memory ticket cache, as browsers
//! do) unless `driver.tls_resume` is false: then every connection is a full handshake.
//!
//! Trusted roots: the system's (`rustls-native-certs`: /etc/ssl/certs on Debian), plus the
//! certificates of `driver.tls_ca_file`. `driver.tls_insecure` accepts any certificate, for a
//! local service with a self-signed one: the handshake's signatures are still verified, so
//! the session is encrypted and the server holds the certificate's key; who signed it is not
//! checked.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::crypto::{self, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::config::DriverConfig;

/// Certificates read from `driver.tls_ca_file`, at most: a CA bundle holds a few hundred.
const MAX_CA_CERTS: usize = 10_000;

/// What every connection of a node starts its TLS from.
pub struct Tls {
    config: Arc<ClientConfig>,
    server_name: ServerName<'static>,
}

impl Tls {
    /// The client config for `host` (a DNS name or an IP address), offering `alpn` (the
    /// protocols in order of preference, e.g. `h2`, `http/1.1`).
    pub fn new(driver: &DriverConfig, host: &str, alpn: &[&[u8]]) -> Result<Tls, String> {
        Tls::with(
            driver.tls_insecure,
            driver.tls_ca_file.as_deref(),
            driver.tls_resume,
            host,
            alpn,
        )
    }

    /// As [`Tls::new`], from the settings themselves (gRPC's driver has its own config).
    pub fn with(
        insecure: bool,
        ca_file: Option<&str>,
        resume: bool,
        host: &str,
        alpn: &[&[u8]],
    ) -> Result<Tls, String> {
        let server_name =
            ServerName::try_from(host.to_string()).map_err(|e| format!("https target host {host:?}: {e}"))?;
        let provider = Arc::new(crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?;
        let mut config = if insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
                .with_no_client_auth()
        } else {
            builder
                .with_root_certificates(roots(ca_file)?)
                .with_no_client_auth()
        };
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        if !resume {
            config.resumption = Resumption::disabled();
        }
        Ok(Tls {
            config: Arc::new(config),
            server_name,
        })
    }

    /// A client session for one connection; its plaintext buffer is not limited by rustls,
    /// since one request at a time (at most its built size) is written into it.
    pub fn session(&self) -> Result<ClientConnection, String> {
        let mut c = ClientConnection::new(self.config.clone(), self.server_name.clone())
            .map_err(|e| format!("TLS: {e}"))?;
        c.set_buffer_limit(None);
        Ok(c)
    }
}

/// The system's roots and those of `ca_file`; an error when none is found.
fn roots(ca_file: Option<&str>) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    let (added, _ignored) = store.add_parsable_certificates(native.certs);
    let mut from_file = 0;
    if let Some(path) = ca_file {
        let certs =
            CertificateDer::pem_file_iter(path).map_err(|e| format!("driver.tls_ca_file {path}: {e}"))?;
        for cert in certs.take(MAX_CA_CERTS) {
            let cert = cert.map_err(|e| format!("driver.tls_ca_file {path}: {e}"))?;
            store
                .add(cert)
                .map_err(|e| format!("driver.tls_ca_file {path}: {e}"))?;
            from_file += 1;
        }
        if from_file == 0 {
            return Err(format!("driver.tls_ca_file {path}: no PEM certificate in it"));
        }
    }
    if added + from_file == 0 {
        let why = native.errors.first().map_or(String::new(), |e| format!(" ({e})"));
        return Err(format!(
            "https: no trusted root certificates found on this system{why}: install \
             ca-certificates, or trust a CA with --cacert / driver.tls_ca_file, or accept a \
             self-signed certificate with --insecure / driver.tls_insecure"
        ));
    }
    Ok(store)
}

/// `tls_insecure`: every certificate is accepted; the handshake's signatures are verified
/// with the certificate's key as usual.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
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
        crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn driver(extra: serde_json::Value) -> DriverConfig {
        let mut d = serde_json::json!({"requests": [{"path": "/"}]});
        d.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::from_value(d).unwrap()
    }

    #[test]
    fn server_names_and_ca_files() {
        assert!(Tls::new(
            &driver(serde_json::json!({"tls_insecure": true})),
            "127.0.0.1",
            &[]
        )
        .is_ok());
        assert!(Tls::new(&driver(serde_json::json!({"tls_insecure": true})), "::1", &[]).is_ok());
        assert!(Tls::new(
            &driver(serde_json::json!({"tls_insecure": true})),
            "bad host!",
            &[]
        )
        .is_err());
        let dir = std::env::temp_dir().join(format!("knee-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let err = Tls::new(
            &driver(serde_json::json!({"tls_ca_file": empty.to_str().unwrap()})),
            "localhost",
            &[],
        )
        .err()
        .unwrap();
        assert!(err.contains("no PEM certificate"), "{err}");
        let err = Tls::new(
            &driver(serde_json::json!({"tls_ca_file": "/nonexistent/ca.pem"})),
            "localhost",
            &[],
        )
        .err()
        .unwrap();
        assert!(err.contains("/nonexistent/ca.pem"), "{err}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
