//! What a browser could be made to do without its user knowing, refused before any route runs: a write without a
//! bearer token from another site's page (a plain `<form method=POST>` carries the proxy's cookie, and the
//! anonymous role needs nothing at all), and any request under a host name that is not this API's while an
//! anonymous role applies (a name rebound by DNS to 127.0.0.1 makes the attacker's page same-origin with a
//! loopback API). A request with a bearer token is left to authentication: a page cannot add one cross-site
//! without a CORS preflight, which only `api.cors_origins` pass. A request with neither `Origin` nor
//! `Sec-Fetch-Site` (curl, the CLI, a script) is not a browser's and passes. Also: no `/api/*` answer is stored
//! by a cache (a new token's secret, a person's view).

use std::sync::Arc;

use axum::{
    extract::{Request, State},
    http::{HeaderMap, HeaderValue, Method, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use scrinalia_shared::{
    Settings,
    config::{WebOrigin, is_loopback_host, split_host_port},
};

use crate::error::ApiError;

/// The browser rules of one configuration, read once.
#[derive(Debug, Clone)]
pub struct Edges {
    /// `api.public_origin`: the one own origin when set; else the request's `Host` says it.
    public_origin: Option<WebOrigin>,
    /// `api.cors_origins`.
    cors_origins: Vec<WebOrigin>,
    /// `api.allowed_hosts`, lower case, and `public_origin`'s host.
    allowed_hosts: Vec<String>,
    /// Whether an anonymous role applies to some requests (then `Host` is checked).
    anonymous: bool,
}

impl Edges {
    /// The rules of `settings` (validated at load: an origin that does not parse is left out).
    pub fn new(settings: &Settings) -> Arc<Self> {
        let api = &settings.api;
        let public_origin = api.public_origin.as_deref().and_then(|o| WebOrigin::parse(o).ok());
        let mut allowed_hosts: Vec<String> = api.allowed_hosts.iter().map(|h| h.to_ascii_lowercase()).collect();
        allowed_hosts.extend(public_origin.iter().map(|o| o.host.clone()));
        Arc::new(Self {
            public_origin,
            cors_origins: api.cors_origins.iter().filter_map(|o| WebOrigin::parse(o).ok()).collect(),
            allowed_hosts,
            anonymous: settings.auth.anonymous_role.is_some(),
        })
    }

    /// Refuses a request a browser may have been tricked into sending; `Ok` for everything else.
    pub fn check(&self, method: &Method, path: &str, headers: &HeaderMap) -> Result<(), ApiError> {
        if headers.contains_key(header::AUTHORIZATION) {
            return Ok(());
        }
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
        // Liveness and readiness probes come from orchestrators with whatever `Host` they use, and tell nothing.
        if self.anonymous && !matches!(path, "/healthz" | "/readyz") {
            self.check_host(host)?;
        }
        if matches!(*method, Method::POST | Method::PUT | Method::PATCH | Method::DELETE) {
            self.check_origin(headers, host)?;
        }
        Ok(())
    }

    fn check_host(&self, host: Option<&str>) -> Result<(), ApiError> {
        let Some(given) = host else { return Ok(()) };
        let name = split_host_port(given.trim()).map(|(name, _)| name);
        if name.as_deref().is_some_and(|n| is_loopback_host(n) || self.allowed_hosts.iter().any(|h| h == n)) {
            return Ok(());
        }
        tracing::warn!(host = given, "request refused: its Host is not one of this API's");
        Err(ApiError::client(
            StatusCode::FORBIDDEN,
            "host_not_allowed",
            format!(
                "This API does not answer to the host name {given:?} while requests without a token get a role: \
                 a page whose name was pointed at this machine could otherwise use that role. Use localhost or a \
                 loopback address, or add the name to api.allowed_hosts."
            ),
        )
        .with("host", given))
    }

    fn check_origin(&self, headers: &HeaderMap, host: Option<&str>) -> Result<(), ApiError> {
        if let Some(origin) = headers.get(header::ORIGIN) {
            let text = origin.to_str().unwrap_or("an unreadable origin");
            let parsed = WebOrigin::parse(text).ok();
            if parsed.as_ref().is_some_and(|o| self.is_own(o, host) || self.cors_origins.contains(o)) {
                return Ok(());
            }
            let own = match (&self.public_origin, host) {
                (Some(o), _) => o.to_string(),
                (None, Some(h)) => format!("the page's own host, {h}"),
                (None, None) => "none: the request has no Host".to_owned(),
            };
            tracing::warn!(origin = text, "write refused: it comes from another site's page");
            return Err(cross_origin(format!(
                "This write comes from a page at {text:?}, which is neither this API's own origin ({own}) nor one \
                 of api.cors_origins; without a bearer token a write is accepted only from those, so that another \
                 site cannot act with a visitor's access. Send `Authorization: Bearer <token>`."
            ))
            .with("origin", text));
        }
        let site = headers.get("sec-fetch-site").and_then(|s| s.to_str().ok());
        match site {
            None | Some("same-origin" | "none") => Ok(()),
            Some(other) => {
                tracing::warn!(sec_fetch_site = other, "write refused: the browser says it comes from another site");
                Err(cross_origin(format!(
                    "The browser says this write comes from another site (Sec-Fetch-Site: {other}); without a \
                     bearer token a write is accepted only from this API's own pages. Send `Authorization: Bearer \
                     <token>`."
                )))
            }
        }
    }

    /// Whether `origin` is this API's own: `api.public_origin` when set, else the origin of the request's `Host`
    /// (whatever the scheme: behind a TLS proxy the page is https, the API plain http).
    fn is_own(&self, origin: &WebOrigin, host: Option<&str>) -> bool {
        match &self.public_origin {
            Some(own) => own == origin,
            None => host.is_some_and(|h| origin.matches_host(h)),
        }
    }
}

fn cross_origin(message: String) -> ApiError {
    ApiError::client(StatusCode::FORBIDDEN, "cross_origin", message)
}

/// The layer of [`Edges::check`].
pub async fn browser_checks(State(edges): State<Arc<Edges>>, request: Request, next: Next) -> Response {
    match edges.check(request.method(), request.uri().path(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refused) => refused.into_response(),
    }
}

/// `Cache-Control: no-store` on every `/api/*` answer: they hold a new token's secret, a person's name and role,
/// the ledger; none is for a shared or a browser cache to keep.
pub async fn no_store(request: Request, next: Next) -> Response {
    let api = request.uri().path().starts_with("/api/");
    let mut response = next.run(request).await;
    if api {
        response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

#[cfg(test)]
mod tests {
    use scrinalia_shared::{Role, config::SettingsFile};

    use super::*;

    fn edges(edit: impl FnOnce(&mut SettingsFile)) -> Arc<Edges> {
        let mut file = SettingsFile::default();
        file.database.url = "sqlite://x.sqlite".into();
        edit(&mut file);
        Edges::new(&Settings::validate("test".into(), file).expect("valid"))
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        pairs.iter().map(|(k, v)| (header::HeaderName::from_static(k), HeaderValue::from_str(v).expect("v"))).collect()
    }

    fn code(result: Result<(), ApiError>) -> Option<&'static str> {
        match result {
            Ok(()) => None,
            Err(ApiError::Client { code, .. }) => Some(code),
            Err(other) => panic!("{other:?}"),
        }
    }

    #[test]
    fn writes_without_a_token_need_the_own_origin_or_a_cors_one() {
        let e = edges(|f| f.api.cors_origins = vec!["https://panel.example".into()]);
        let post = |pairs: &[(&'static str, &str)]| code(e.check(&Method::POST, "/api/x", &headers(pairs)));
        assert_eq!(post(&[]), None, "curl and the CLI send neither header");
        assert_eq!(post(&[("host", "127.0.0.1:8080"), ("origin", "http://127.0.0.1:8080")]), None);
        assert_eq!(post(&[("host", "sched.example"), ("origin", "https://sched.example")]), None);
        assert_eq!(post(&[("host", "127.0.0.1:8080"), ("origin", "https://panel.example")]), None);
        assert_eq!(post(&[("host", "127.0.0.1:8080"), ("origin", "https://evil.example")]), Some("cross_origin"));
        assert_eq!(post(&[("host", "127.0.0.1:8080"), ("origin", "null")]), Some("cross_origin"));
        assert_eq!(post(&[("host", "127.0.0.1:8080"), ("origin", "http://127.0.0.1:9999")]), Some("cross_origin"));
        assert_eq!(post(&[("sec-fetch-site", "cross-site")]), Some("cross_origin"));
        assert_eq!(post(&[("sec-fetch-site", "same-site")]), Some("cross_origin"));
        assert_eq!(post(&[("sec-fetch-site", "same-origin")]), None);
        assert_eq!(post(&[("origin", "https://evil.example"), ("authorization", "Bearer x")]), None);
        let get = code(e.check(&Method::GET, "/api/x", &headers(&[("origin", "https://evil.example")])));
        assert_eq!(get, None, "reads are CORS's to guard");
    }

    #[test]
    fn a_public_origin_replaces_the_host_as_the_own_origin() {
        let e = edges(|f| f.api.public_origin = Some("https://sched.example".into()));
        let post = |pairs: &[(&'static str, &str)]| code(e.check(&Method::DELETE, "/api/x", &headers(pairs)));
        assert_eq!(post(&[("host", "127.0.0.1:8080"), ("origin", "https://sched.example")]), None);
        assert_eq!(post(&[("host", "127.0.0.1:8080"), ("origin", "http://127.0.0.1:8080")]), Some("cross_origin"));
    }

    #[test]
    fn an_anonymous_role_needs_a_known_host() {
        let e = edges(|f| {
            f.auth.anonymous_role = Some(Role::Viewer);
            f.api.allowed_hosts = vec!["sched.internal".into()];
        });
        let get = |host: &str| code(e.check(&Method::GET, "/api/workers", &headers(&[("host", host)])));
        for ok in ["127.0.0.1:8080", "localhost:8080", "[::1]:8080", "sched.internal:80", "SCHED.internal"] {
            assert_eq!(get(ok), None, "{ok}");
        }
        for bad in ["attacker.example:8080", "127.0.0.1.nip.io:8080", "10.0.0.1"] {
            assert_eq!(get(bad), Some("host_not_allowed"), "{bad}");
        }
        assert_eq!(code(e.check(&Method::GET, "/healthz", &headers(&[("host", "x.example")]))), None);
        let closed = edges(|_| {});
        assert_eq!(code(closed.check(&Method::GET, "/api/x", &headers(&[("host", "x.example")]))), None);
    }
}
