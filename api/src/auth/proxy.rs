//! The trusted-proxy mode (`[auth.proxy]`): a reverse proxy that signed the person in names them and their groups
//! in two headers. The headers are believed only from a peer in `trusted`; from any other peer they are ignored,
//! as if absent, so a client that reaches the API directly cannot name itself. When `secret_header` is set, a
//! request from a trusted peer must also carry the proxy's secret in it: another process on the proxy's address
//! (a worker on the same host) cannot pose as the proxy. The groups map to a role through `[auth.groups]`, as
//! OpenID Connect claims do.
//!
//! Only the last line of each header counts: a proxy that appends to what the client sent (rather than replacing
//! it) puts its own line last, so two `X-Forwarded-Groups` lines never merge a client's groups into the person's.
//!
//! The caller is named `user (via proxy)`: the proxy's user header is the person's stable name there, and the
//! suffix tells the audit trail how they signed in (no token name has a space or parentheses).

use std::{collections::BTreeMap, net::IpAddr};

use axum::http::{HeaderMap, HeaderValue, request::Parts};
use scrinalia_shared::{
    Role,
    auth::{hash_token, hashes_equal},
    config::{Peer, ProxySettings, role_of},
    names::clean_name,
};

use super::jwt::no_role;
use crate::error::ApiError;

/// The longest user name kept.
const MAX_USER: usize = 200;

/// The last line of the header `name`: the proxy's own when it appended to what the client sent.
fn last_line<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a HeaderValue> {
    headers.get_all(name).iter().next_back()
}

/// Whether `peer` is one of the proxy's addresses.
pub fn is_trusted(peer: Option<IpAddr>, trusted: &[Peer]) -> bool {
    peer.is_some_and(|peer| trusted.iter().any(|t| t.contains(peer)))
}

/// Whether the request carries the proxy's secret: always true when none is configured. The value is hashed and
/// compared in constant time, as bearer tokens are.
pub fn has_secret(headers: &HeaderMap, settings: &ProxySettings) -> bool {
    let (Some(name), Some(expected)) = (&settings.secret_header, &settings.secret_hash) else { return true };
    let given = last_line(headers, name).and_then(|v| v.to_str().ok());
    given.is_some_and(|value| hashes_equal(&hash_token(value.trim()), expected))
}

/// The person a trusted proxy names, if `peer` is trusted and the user header is there; `None` otherwise.
pub fn person(
    parts: &Parts,
    peer: Option<IpAddr>,
    settings: &ProxySettings,
    trusted: &[Peer],
    groups: &BTreeMap<String, Role>,
) -> Option<Result<(String, Role), ApiError>> {
    if !is_trusted(peer, trusted) {
        return None;
    }
    // UTF-8, not only ASCII: a person's name may have accents (and unsafe characters, which are removed).
    let user = std::str::from_utf8(last_line(&parts.headers, &settings.user_header)?.as_bytes()).ok()?;
    let user = clean_name(user, MAX_USER);
    if user.is_empty() {
        return None;
    }
    if !has_secret(&parts.headers, settings) {
        let header = settings.secret_header.as_deref().unwrap_or_default();
        return Some(Err(ApiError::Unauthorized(format!(
            "This request names a person in {}, but it does not carry the proxy's secret in {header}: only the \
             proxy may name people. Sign in through the proxy, or send `Authorization: Bearer <token>`.",
            settings.user_header
        ))));
    }
    let name = format!("{user} (via proxy)");
    let values: Vec<&str> = last_line(&parts.headers, &settings.groups_header)
        .and_then(|v| v.to_str().ok())
        .into_iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .collect();
    Some(match role_of(groups, values.iter().copied()) {
        Some(role) => Ok((name, role)),
        None => Err(no_role(&name, &format!("groups (the {} header)", settings.groups_header), &values)),
    })
}
