//! Model engines: the model servers the catalogue declares once for all workers, with the presets each offers.
//! The catalogue reads them from configuration and the API shows them beside the workers, so both use this type.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A model engine (a model server) and the presets it offers, declared once for all workers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Engine {
    /// The kind of server, for health checks: `ollama` speaks Ollama's HTTP API; `none` is checked by nobody.
    #[serde(default = "default_engine_kind")]
    pub kind: String,
    /// Where the engine is called (the model server's base URL), if it is a server.
    #[serde(default)]
    pub url: Option<String>,
    /// Preset name → model name.
    #[serde(default)]
    pub presets: BTreeMap<String, String>,
    /// A sentence for people.
    #[serde(default)]
    pub description: Option<String>,
}

fn default_engine_kind() -> String {
    "ollama".to_owned()
}
