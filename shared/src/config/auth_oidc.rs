//! `[auth.oidc]`, `[auth.proxy]` and `[auth.groups]`: signing people in rather than handing out tokens. An
//! OpenID Connect access token (a JWT) from the configured issuer is checked against the issuer's published keys;
//! or a trusted reverse proxy that signed the person in says who they are in headers. Either way the person's
//! groups (a claim, or a header) map to a role through `[auth.groups]`, the highest mapped role winning.
//!
//! Checked here: what would make the check unsafe (an HMAC algorithm or `none`, an empty issuer or audience, keys
//! fetched over plain http from another host, a long leeway, a proxy trusted from nowhere or from a network wider
//! than a /8, half a proxy secret, a configured token's name that could be misread) is refused at load, so it
//! never reaches a request.

use std::{collections::BTreeMap, net::IpAddr, path::PathBuf};

use serde::{Deserialize, Serialize};

use crate::auth::Role;

/// The algorithms an issuer may sign with, by default.
pub const DEFAULT_ALGORITHMS: [&str; 2] = ["RS256", "ES256"];
/// The public-key algorithms that can be allowed.
pub const PUBLIC_KEY_ALGORITHMS: [&str; 9] =
    ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"];

/// The largest clock skew allowed on an access token's times: beyond it an expired token stays good too long.
pub const MAX_LEEWAY_SECONDS: u64 = 300;
/// The shortest prefix (the widest network) `[auth.proxy].trusted` may list without `allow_wide_trust`.
pub const WIDEST_TRUST_PREFIX: u8 = 8;

/// `[auth.oidc]`: access tokens from one OpenID Connect issuer.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct OidcSettings {
    /// The issuer, exactly as the tokens' `iss` claim says it (`https://idp.example.org/realms/archive`).
    pub issuer: String,
    /// What the tokens' `aud` must include (the client id the issuer knows this API by).
    pub audience: String,
    /// Where the issuer publishes its keys (JWKS); fetched, cached, fetched again for an unknown `kid`.
    pub jwks_url: Option<String>,
    /// A JWKS file instead of `jwks_url`, read at start (an issuer this host cannot reach).
    pub jwks_file: Option<PathBuf>,
    /// The signature algorithms accepted; public-key ones only (`HS*` and `none` are refused at load).
    pub algorithms: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds; at most [`MAX_LEEWAY_SECONDS`].
    pub leeway_seconds: u64,
    /// The claim whose values map to roles through `[auth.groups]`: a list of strings or one string; a dotted
    /// path reaches into objects (`realm_access.roles`).
    pub roles_claim: String,
    /// The claim naming the person; `preferred_username` when it is absent.
    pub display_name_claim: String,
    /// The least time between two fetches of `jwks_url` caused by tokens with an unknown `kid`, in seconds.
    pub jwks_refetch_seconds: u64,
    /// How long fetched keys are used before they are fetched again, in seconds.
    pub jwks_max_age_seconds: u64,
    /// `[auth.oidc.panel]`: the web panel signs people in itself (authorization code with PKCE); off when absent.
    pub panel: Option<PanelSignIn>,
}

/// `[auth.oidc.panel]`: how the web panel signs a person in with the issuer. The panel is a public client (no
/// secret, which a page could not keep): it sends the person to `authorization_endpoint` with a PKCE challenge and
/// exchanges the code for an access token at `token_endpoint`, from the browser, so the issuer must allow the
/// panel's origin (CORS) and its redirect URI (the panel's address, e.g. `https://scheduler.example.org/`). Both
/// endpoints are in the issuer's `/.well-known/openid-configuration`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct PanelSignIn {
    /// The client id the issuer knows the panel by. The access tokens it gets must still carry `audience`.
    pub client_id: String,
    /// Where the person signs in (the issuer's `authorization_endpoint`).
    pub authorization_endpoint: String,
    /// Where the panel exchanges the code (the issuer's `token_endpoint`).
    pub token_endpoint: String,
    /// The scopes asked for.
    pub scope: String,
}

impl Default for PanelSignIn {
    fn default() -> Self {
        Self {
            client_id: String::new(),
            authorization_endpoint: String::new(),
            token_endpoint: String::new(),
            scope: "openid profile".to_owned(),
        }
    }
}

impl Default for OidcSettings {
    fn default() -> Self {
        Self {
            issuer: String::new(),
            audience: String::new(),
            jwks_url: None,
            jwks_file: None,
            algorithms: DEFAULT_ALGORITHMS.iter().map(|a| (*a).to_owned()).collect(),
            leeway_seconds: 30,
            roles_claim: "groups".to_owned(),
            display_name_claim: "name".to_owned(),
            jwks_refetch_seconds: 30,
            jwks_max_age_seconds: 600,
            panel: None,
        }
    }
}

/// `[auth.proxy]`: a reverse proxy that signed the person in, trusted from `trusted` only.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ProxySettings {
    /// The header naming the person (`X-Forwarded-User`).
    pub user_header: String,
    /// The header listing the person's groups, comma-separated (`X-Forwarded-Groups`).
    pub groups_header: String,
    /// The proxy's addresses: IPs or CIDRs (`127.0.0.1`, `10.0.0.0/8`, `::1`). From any other peer the headers
    /// are ignored. A network wider than a /8 is refused unless `allow_wide_trust` is set.
    pub trusted: Vec<String>,
    /// Accept a `trusted` network wider than a /8 (`0.0.0.0/0`), with a warning at every start: only when the
    /// proxy's address cannot be known and `secret_header` proves that a request came through it.
    pub allow_wide_trust: bool,
    /// A header the proxy sets on every request to a secret value (`X-Scrinalia-Proxy-Secret`), so that another
    /// process on a trusted address (a worker on the same host) cannot pose as the proxy. Needs `secret_hash`.
    pub secret_header: Option<String>,
    /// `sha256:<hex>` of the secret header's value (`scrinalia-api token` prints a secret and its hash).
    pub secret_hash: Option<String>,
}

impl Default for ProxySettings {
    fn default() -> Self {
        Self {
            user_header: "X-Forwarded-User".to_owned(),
            groups_header: "X-Forwarded-Groups".to_owned(),
            trusted: Vec::new(),
            allow_wide_trust: false,
            secret_header: None,
            secret_hash: None,
        }
    }
}

/// An address or a network a proxy is trusted from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    net: IpAddr,
    prefix: u8,
}

impl Peer {
    /// Reads `127.0.0.1`, `10.0.0.0/8`, `::1` or `fd00::/8`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (addr, prefix) = match text.trim().split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text.trim(), None),
        };
        let net: IpAddr = addr.parse().map_err(|_| format!("{text:?} is not an IP address or a CIDR"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{text:?} has a prefix length that is not a number from 0 to {max}"))?,
            None => max,
        };
        Ok(Self { net, prefix })
    }

    /// The prefix length (32 or 128 for one address).
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` is this address or in this network (an IPv4-mapped IPv6 peer counts as its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.net, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                masked(u32::from(n).into(), 32, self.prefix) == masked(u32::from(a).into(), 32, self.prefix)
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                masked(u128::from(n), 128, self.prefix) == masked(u128::from(a), 128, self.prefix)
            }
            _ => false,
        }
    }
}

fn masked(bits: u128, width: u8, prefix: u8) -> u128 {
    if prefix == 0 { 0 } else { bits >> (width - prefix) }
}

/// The highest role `groups` map to through `mapping`, if any.
pub fn role_of<'a>(mapping: &BTreeMap<String, Role>, groups: impl IntoIterator<Item = &'a str>) -> Option<Role> {
    groups.into_iter().filter_map(|g| mapping.get(g).copied()).max()
}

/// What is wrong with `[auth.oidc]`, `[auth.proxy]` and `[auth.groups]`, each with its full key.
pub fn auth_problems(
    oidc: Option<&OidcSettings>,
    proxy: Option<&ProxySettings>,
    groups: &BTreeMap<String, Role>,
) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    let mut problem = |key: &str, message: String| problems.push((key.to_owned(), message));
    if let Some(o) = oidc {
        if o.issuer.trim().is_empty() {
            problem("auth.oidc.issuer", "must be the issuer exactly as the tokens' `iss` says it".into());
        }
        if o.audience.trim().is_empty() {
            problem("auth.oidc.audience", "must be what the tokens' `aud` includes (this API's client id)".into());
        }
        match (&o.jwks_url, &o.jwks_file) {
            (None, None) => {
                problem("auth.oidc.jwks_url", "give jwks_url or jwks_file: where the issuer's keys are".into())
            }
            (Some(_), Some(_)) => problem("auth.oidc.jwks_file", "give jwks_url or jwks_file, not both".into()),
            (Some(url), None) if !(url.starts_with("https://") || url.starts_with("http://")) => {
                problem("auth.oidc.jwks_url", format!("{url:?} is not an http(s) URL"));
            }
            (Some(url), None) if url.starts_with("http://") && !is_loopback_url(url) => problem(
                "auth.oidc.jwks_url",
                format!(
                    "{url:?} is plain http to another host: whoever sits on the path could hand the API keys of their \
                     own and sign any token; use https (plain http is accepted for a loopback address only)"
                ),
            ),
            _ => {}
        }
        if o.algorithms.is_empty() {
            problem(
                "auth.oidc.algorithms",
                "must allow at least one algorithm (the default is RS256 and ES256)".into(),
            );
        }
        for alg in &o.algorithms {
            if alg.eq_ignore_ascii_case("none") {
                problem("auth.oidc.algorithms", "\"none\" is never allowed: an unsigned token proves nothing".into());
            } else if alg.to_ascii_uppercase().starts_with("HS") {
                problem(
                    "auth.oidc.algorithms",
                    format!(
                        "{alg:?} is refused: an HMAC token is signed with a shared secret, and checking one with the issuer's public key would let anyone who has that key sign tokens"
                    ),
                );
            } else if !PUBLIC_KEY_ALGORITHMS.contains(&alg.as_str()) {
                problem("auth.oidc.algorithms", format!("{alg:?} is not one of {}", PUBLIC_KEY_ALGORITHMS.join(", ")));
            }
        }
        if o.roles_claim.trim().is_empty() {
            problem("auth.oidc.roles_claim", "must name the claim that lists the person's groups or roles".into());
        }
        if o.display_name_claim.trim().is_empty() {
            problem("auth.oidc.display_name_claim", "must name the claim that names the person".into());
        }
        if o.leeway_seconds > MAX_LEEWAY_SECONDS {
            problem(
                "auth.oidc.leeway_seconds",
                format!(
                    "{} s is too long: an expired token would stay good that long; at most {MAX_LEEWAY_SECONDS} s",
                    o.leeway_seconds
                ),
            );
        }
        if o.jwks_refetch_seconds == 0 {
            problem("auth.oidc.jwks_refetch_seconds", "must be at least 1 second (it rate-limits the fetches)".into());
        }
        if o.jwks_max_age_seconds == 0 {
            problem("auth.oidc.jwks_max_age_seconds", "must be at least 1 second".into());
        }
        if let Some(panel) = &o.panel {
            if panel.client_id.trim().is_empty() {
                problem("auth.oidc.panel.client_id", "must be the client id the issuer knows the panel by".into());
            }
            for (key, url) in [
                ("auth.oidc.panel.authorization_endpoint", &panel.authorization_endpoint),
                ("auth.oidc.panel.token_endpoint", &panel.token_endpoint),
            ] {
                if !(url.starts_with("https://") || url.starts_with("http://")) {
                    problem(key, format!("{url:?} is not an http(s) URL (see the issuer's openid-configuration)"));
                }
            }
        }
    }
    if let Some(p) = proxy {
        if p.trusted.is_empty() {
            problem(
                "auth.proxy.trusted",
                "must list the proxy's addresses (IPs or CIDRs); from others the headers are ignored".into(),
            );
        }
        for peer in &p.trusted {
            match Peer::parse(peer) {
                Err(e) => problem("auth.proxy.trusted", e),
                Ok(net) if net.prefix() < WIDEST_TRUST_PREFIX && !p.allow_wide_trust => problem(
                    "auth.proxy.trusted",
                    format!(
                        "{peer:?} is wider than a /{WIDEST_TRUST_PREFIX}: anyone there could name themselves admin \
                         in the proxy's headers; list the proxy's own addresses (or set auth.proxy.allow_wide_trust = \
                         true together with auth.proxy.secret_header if it truly cannot be known)"
                    ),
                ),
                Ok(_) => {}
            }
        }
        match (&p.secret_header, &p.secret_hash) {
            (Some(header), Some(hash)) => {
                if !header_name_ok(header) {
                    problem("auth.proxy.secret_header", format!("{header:?} is not a header name"));
                }
                if !crate::auth::is_token_hash(hash) {
                    problem(
                        "auth.proxy.secret_hash",
                        "must be sha256:<64 hex digits> of the header's value, as `scrinalia-api token` prints it; \
                         never the value itself"
                            .into(),
                    );
                }
            }
            (Some(_), None) => problem("auth.proxy.secret_hash", "must be set with auth.proxy.secret_header".into()),
            (None, Some(_)) => problem("auth.proxy.secret_header", "must be set with auth.proxy.secret_hash".into()),
            (None, None) => {}
        }
        for (key, header) in
            [("auth.proxy.user_header", &p.user_header), ("auth.proxy.groups_header", &p.groups_header)]
        {
            if !header_name_ok(header) {
                problem(key, format!("{header:?} is not a header name"));
            }
        }
    }
    if (oidc.is_some() || proxy.is_some()) && groups.is_empty() {
        problem("auth.groups", "must map at least one group to a role, or nobody signed in gets one".into());
    }
    problems
}

/// What is wrong with `[[auth.tokens]]`: a hash that is not one, a name that is empty or could be misread.
pub fn token_problems(tokens: &[super::TokenSettings]) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        if !crate::auth::is_token_hash(&token.hash) {
            problems.push((
                format!("auth.tokens[{i}].hash"),
                "must be sha256:<64 hex digits>, as printed by `scrinalia-api token`; never the token itself".into(),
            ));
        }
        if token.name.trim().is_empty() {
            problems.push((format!("auth.tokens[{i}].name"), "must name who holds the token".into()));
        } else if let Some(c) = crate::names::unsafe_char(&token.name) {
            problems.push((
                format!("auth.tokens[{i}].name"),
                format!(
                    "contains U+{:04X}, a control or invisible character that changes how the audit trail reads",
                    u32::from(c)
                ),
            ));
        }
    }
    problems
}

/// Whether `url`'s host is `localhost` or a loopback address (a local issuer, or a test's).
fn is_loopback_url(url: &str) -> bool {
    reqwest::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .is_some_and(|h| super::is_loopback_host(&h))
}

/// Whether `name` is a valid HTTP header name (visible ASCII token characters).
fn header_name_ok(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_match_addresses_and_networks() {
        let net = Peer::parse("10.9.0.0/16").expect("a CIDR");
        assert!(net.contains("10.9.9.9".parse().expect("an ip")));
        assert!(!net.contains("10.8.9.9".parse().expect("an ip")));
        assert!(net.contains("::ffff:10.9.1.1".parse().expect("a mapped ip")));
        assert!(Peer::parse("127.0.0.1").expect("an ip").contains("127.0.0.1".parse().expect("an ip")));
        assert!(Peer::parse("0.0.0.0/0").expect("all").contains("192.0.2.1".parse().expect("an ip")));
        assert!(Peer::parse("::1").expect("v6").contains("::1".parse().expect("an ip")));
        assert!(Peer::parse("10.0.0.0/33").is_err() && Peer::parse("host").is_err());
    }

    #[test]
    fn hmac_none_and_missing_pieces_are_refused_at_load() {
        let oidc =
            OidcSettings { algorithms: vec!["HS256".into(), "none".into(), "RS256".into()], ..OidcSettings::default() };
        let problems = auth_problems(Some(&oidc), None, &BTreeMap::new());
        let keys: Vec<&str> = problems.iter().map(|p| p.0.as_str()).collect();
        assert_eq!(
            keys,
            [
                "auth.oidc.issuer",
                "auth.oidc.audience",
                "auth.oidc.jwks_url",
                "auth.oidc.algorithms",
                "auth.oidc.algorithms",
                "auth.groups"
            ]
        );
        assert!(problems[3].1.contains("HMAC"), "{problems:?}");
        let groups = [("ops".to_owned(), Role::Operator), ("admins".to_owned(), Role::Admin)].into();
        assert_eq!(role_of(&groups, ["ops", "admins", "other"]), Some(Role::Admin));
        assert_eq!(role_of(&groups, ["other"]), None);
    }
}
