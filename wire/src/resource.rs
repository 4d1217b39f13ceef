//! Shared resources as the API shows them: each catalogue resource with the capacity claims use now (the
//! catalogue's, or an audited override of it), the runs holding it, and the append-only trail of capacity changes.
//! The CLI and the panel read these, so an operator sees the same number a claim counts against.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize};
use uuid::Uuid;

use crate::{Named, named};

/// Where a resource's effective capacity comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ResourceSource {
    /// The catalogue's `[[resources]]` entry.
    Default,
    /// An override set through the API (who and when are beside it).
    Override,
}

impl Named for ResourceSource {
    const ALL: &'static [Self] = &[Self::Default, Self::Override];
    const NOUN: &'static str = "a capacity source";
    const PLURAL: &'static str = "the capacity sources";

    fn name(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::Override => "override",
        }
    }
}
named!(ResourceSource);

/// Where a resource's capacity lives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ResourceScope {
    /// One capacity across all daemons (one model server): the catalogue's `capacity`, or an audited override.
    #[default]
    Global,
    /// A capacity on each daemon (a host's GPUs): its `daemon.resources`. A run holds a numbered slot of the
    /// daemon that claimed it, given to its worker as `SCRINALIA_RESOURCE_<NAME>`.
    Daemon,
}

impl Named for ResourceScope {
    const ALL: &'static [Self] = &[Self::Global, Self::Daemon];
    const NOUN: &'static str = "a resource scope";
    const PLURAL: &'static str = "the resource scopes";

    fn name(self) -> &'static str {
        match self {
            Self::Global => "global",
            Self::Daemon => "daemon",
        }
    }
}
named!(ResourceScope);

/// A daemon-scoped resource on one live daemon: its capacity there and the runs holding its slots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResourceOnDaemon {
    /// The daemon.
    pub daemon: Uuid,
    /// Its host.
    pub host: String,
    /// Its `daemon.resources` count of the resource.
    pub capacity: u32,
    /// The runs holding a slot there, by slot.
    pub holders: Vec<SlotHolder>,
}

/// A slot of a daemon-scoped resource and the run holding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SlotHolder {
    /// The slot's number (the worker's `SCRINALIA_RESOURCE_<NAME>`).
    pub slot: u32,
    /// The run holding it.
    pub run_id: Uuid,
}

/// One catalogue resource, its capacity now and who holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResourceView {
    /// The resource's name.
    pub name: String,
    /// The catalogue's sentence about it.
    #[serde(default)]
    pub description: Option<String>,
    /// The capacity the catalogue declares.
    pub catalogue_capacity: u32,
    /// The capacity the next claim counts against: the override's when there is one, else the catalogue's.
    pub capacity: u32,
    /// Where `capacity` comes from.
    pub source: ResourceSource,
    /// Who set the override (absent when the catalogue's applies).
    #[serde(default)]
    pub updated_by: Option<String>,
    /// When, on the database clock (absent when the catalogue's applies).
    #[serde(default)]
    pub updated_at: Option<DateTime<Utc>>,
    /// The runs holding a slot now, oldest hold first; there may be more than `capacity` right after it was
    /// lowered (runs already holding are never stopped).
    pub holders: Vec<Uuid>,
    /// `global` (one capacity for all daemons) or `daemon` (each daemon's own; `capacity` is then the sum over the
    /// live daemons, and `catalogue_capacity` 0).
    #[serde(default)]
    pub scope: ResourceScope,
    /// For a daemon-scoped resource, each live daemon that offers it, with its capacity and holders.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub daemons: Vec<ResourceOnDaemon>,
}

/// `GET /api/resources`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResourcesView {
    /// Every catalogue resource, in catalogue order.
    pub resources: Vec<ResourceView>,
}

/// One entry of the append-only trail of capacity changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResourceAuditEntry {
    /// Its position.
    pub id: i64,
    /// The resource.
    pub resource: String,
    /// Who.
    pub actor: String,
    /// When, on the database clock.
    pub at: DateTime<Utc>,
    /// The overridden capacity before (absent: the catalogue's applied).
    pub before: Option<u32>,
    /// The overridden capacity after (absent: back to the catalogue's).
    pub after: Option<u32>,
    /// Why.
    pub reason: String,
}

/// `GET /api/resources/{name}/audit`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResourceAudit {
    /// The resource.
    pub resource: String,
    /// Who changed its capacity, when and why; newest first.
    pub entries: Vec<ResourceAuditEntry>,
}

/// The body of `PUT /api/resources/{name}`: a capacity, or `null` to follow the catalogue again, and why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ResourceChange {
    /// The new capacity; `null` removes the override (the catalogue's applies again). Required: a body that
    /// forgets it must not silently reset the capacity.
    #[serde(default, deserialize_with = "present")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<u32>, required = true))]
    pub capacity: Option<Option<u32>>,
    /// Why (required, recorded in the audit trail).
    #[serde(default)]
    pub reason: Option<String>,
}

/// A field present in the JSON, `null` included, is `Some`: `Some(None)` resets, `None` was not given.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<u32>>, D::Error> {
    Option::<u32>::deserialize(d).map(Some)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_change_tells_null_from_absent() {
        let parse = |v: serde_json::Value| serde_json::from_value::<ResourceChange>(v).expect("a change");
        assert_eq!(parse(json!({"capacity": 2, "reason": "r"})).capacity, Some(Some(2)));
        assert_eq!(parse(json!({"capacity": null, "reason": "r"})).capacity, Some(None));
        assert_eq!(parse(json!({"reason": "r"})).capacity, None);
        assert!(serde_json::from_value::<ResourceChange>(json!({"capacity": -1})).is_err());
        assert!(serde_json::from_value::<ResourceChange>(json!({"capacity": 1, "why": "r"})).is_err());
    }
}
