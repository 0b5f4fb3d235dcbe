//! The client of one cluster's API, made from a kubeconfig (kube-rs), and
//! why a request to it failed.

use kube::config::{KubeConfigOptions, Kubeconfig};

/// The field manager talosprov's server-side applies use (`kubectl`'s
/// `--field-manager`): the owner of the fields talosprov applied.
pub const FIELD_MANAGER: &str = "talosprov";

/// Why the Kubernetes API could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// The kubeconfig is not one kube-rs can use.
    #[error("the kubeconfig cannot be used: {0}")]
    Kubeconfig(String),
    /// The API answered with an error, or did not answer.
    #[error("the Kubernetes API: {0}")]
    Api(String),
}

/// A client of one cluster's API.
#[derive(Clone)]
pub struct KubeClient {
    pub(crate) client: kube::Client,
}

impl std::fmt::Debug for KubeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeClient")
            .field("default_namespace", &self.client.default_namespace())
            .finish_non_exhaustive()
    }
}

impl KubeClient {
    /// A client from a kubeconfig's text, using its current context.
    ///
    /// # Errors
    /// [`KubeError::Kubeconfig`] when the text is not a kubeconfig or its credentials
    /// cannot be loaded.
    pub async fn from_kubeconfig(yaml: &str) -> Result<Self, KubeError> {
        let bad = |e: &dyn std::fmt::Display| KubeError::Kubeconfig(e.to_string());
        let kubeconfig = Kubeconfig::from_yaml(yaml).map_err(|e| bad(&e))?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| bad(&e))?;
        let client = kube::Client::try_from(config).map_err(|e| bad(&e))?;
        Ok(KubeClient { client })
    }
}
