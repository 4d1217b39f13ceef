//! The trusted-proxy mode (`[auth.proxy]`): a reverse proxy that signed the person in names them and their groups
//! in two headers. The headers are believed only from a peer in `trusted`; from any other peer they are ignored,
//! as if absent, so a client that reaches the API directly cannot name itself. The groups map to a role through
//! `[auth.groups]`, as OpenID Connect claims do.
//!
//! The caller is named `user (via proxy)`: the proxy's user header is the person's stable name there, and the
//! suffix tells the audit trail how they signed in (no token name has a space or parentheses).

use std::{collections::BTreeMap, net::IpAddr};

use axum::http::request::Parts;
use scrinalia_shared::{
    Role,
    config::{Peer, ProxySettings, role_of},
};

use super::jwt::no_role;
use crate::error::ApiError;

/// The longest user name kept.
const MAX_USER: usize = 200;

/// The person a trusted proxy names, if `peer` is trusted and the user header is there; `None` otherwise.
pub fn person(
    parts: &Parts,
    peer: Option<IpAddr>,
    settings: &ProxySettings,
    trusted: &[Peer],
    groups: &BTreeMap<String, Role>,
) -> Option<Result<(String, Role), ApiError>> {
    let peer = peer?;
    if !trusted.iter().any(|t| t.contains(peer)) {
        return None;
    }
    let user = parts.headers.get(settings.user_header.as_str())?.to_str().ok()?;
    let user: String = user.chars().filter(|c| !c.is_control()).take(MAX_USER).collect::<String>().trim().to_owned();
    if user.is_empty() {
        return None;
    }
    let name = format!("{user} (via proxy)");
    let values: Vec<&str> = parts
        .headers
        .get_all(settings.groups_header.as_str())
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .collect();
    Some(match role_of(groups, values.iter().copied()) {
        Some(role) => Ok((name, role)),
        None => Err(no_role(&name, &format!("groups (the {} header)", settings.groups_header), &values)),
    })
}
