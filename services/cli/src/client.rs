//! The connection to the orchestrator: TLS when the address is `https://`,
//! the API key as the bearer of every call.

use chorus_proto::orchestrator::v1::orchestrator_client::OrchestratorClient;
use tonic::metadata::MetadataValue;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use crate::fail::Fail;
use crate::profile::Target;

/// Adds `authorization: Bearer <key>` to every call.
#[derive(Clone)]
pub struct Bearer(MetadataValue<tonic::metadata::Ascii>);

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Bearer(…)")
    }
}

impl Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        request
            .metadata_mut()
            .insert("authorization", self.0.clone());
        Ok(request)
    }
}

pub type Client = OrchestratorClient<InterceptedService<Channel, Bearer>>;

/// A client of the orchestrator `target` names. The channel connects on the
/// first call, so a command that fails before calling costs nothing.
pub fn connect(target: &Target) -> Result<Client, Fail> {
    let mut endpoint = Endpoint::from_shared(target.address.clone())
        .map_err(|e| Fail::usage(format!("'{}' is not an address: {e}", target.address)))?;
    endpoint = chorus_proto::channel::tune(endpoint);
    if target.address.starts_with("https://") {
        let mut tls = ClientTlsConfig::new();
        tls = match &target.ca_file {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|e| {
                    Fail::usage(format!("cannot read the CA file {}: {e}", path.display()))
                })?;
                tls.ca_certificate(Certificate::from_pem(pem))
            }
            None => tls.with_enabled_roots(),
        };
        if let Some(domain) = &target.tls_domain {
            tls = tls.domain_name(domain.clone());
        }
        endpoint = endpoint
            .tls_config(tls)
            .map_err(|e| Fail::usage(format!("TLS for {}: {e}", target.address)))?;
    }
    let bearer = MetadataValue::try_from(format!("Bearer {}", target.key))
        .map_err(|_| Fail::usage("the API key has characters a header cannot carry"))?;
    let channel = endpoint.connect_lazy();
    Ok(
        OrchestratorClient::with_interceptor(channel, Bearer(bearer))
            .max_decoding_message_size(64 * 1024 * 1024),
    )
}
