//! The web panel: plain HTML, CSS and JavaScript modules from `api/panel/`, built into the binary, served at `/`
//! and `/panel/<file>`. It reads and writes only through the public `/api/...` endpoints, as the archive's own SPA
//! would. No build step and no Node toolchain: the files are served as they are in the repository.
//!
//! Every answer carries a strict Content-Security-Policy (nothing but the panel's own origin; no inline script or
//! style), `Cache-Control: no-cache` and an `ETag`, so a browser revalidates cheaply and never runs a stale panel
//! against a newer API.

use std::sync::LazyLock;

use axum::{
    Router,
    extract::Path,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};

/// The policy of every panel answer: only the panel's own origin, for scripts, styles, images and API calls.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

/// The policy with `connect` (an origin such as `https://idp.example.org`) allowed for fetches too: the panel's
/// sign-in exchanges its code at the identity provider's token endpoint, from the browser.
pub fn content_security_policy(connect: Option<&str>) -> String {
    match connect {
        Some(origin) => CONTENT_SECURITY_POLICY.replace("connect-src 'self'", &format!("connect-src 'self' {origin}")),
        None => CONTENT_SECURITY_POLICY.to_owned(),
    }
}

/// The origin (`scheme://host[:port]`) of an http(s) URL, for a policy; `None` when it is not one.
pub fn origin_of(url: &str) -> Option<String> {
    let url = reqwest::Url::parse(url).ok()?;
    matches!(url.scheme(), "http" | "https").then(|| url.origin().ascii_serialization())
}

/// One file of the panel.
struct Asset {
    /// Its name under `/panel/`.
    name: &'static str,
    /// Its media type.
    content_type: &'static str,
    /// Its bytes, built into the binary.
    body: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $content_type:expr) => {
        Asset { name: $name, content_type: $content_type, body: include_bytes!(concat!("../panel/", $name)) }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file of the panel; anything else under `/panel/` is a 404.
static ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("icon.svg", "image/svg+xml"),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("dom.js", JS),
    asset!("format.js", JS),
    asset!("form.js", JS),
    asset!("health.js", JS),
    asset!("workers.js", JS),
    asset!("worker-items.js", JS),
    asset!("worker-freshness.js", JS),
    asset!("worker-limits.js", JS),
    asset!("worker-pause.js", JS),
    asset!("worker-lines.js", JS),
    asset!("worker-table.js", JS),
    asset!("quarantine.js", JS),
    asset!("runs.js", JS),
    asset!("bulk.js", JS),
    asset!("run.js", JS),
    asset!("run-items.js", JS),
    asset!("run-shards.js", JS),
    asset!("run-usage.js", JS),
    asset!("overrides.js", JS),
    asset!("schedules.js", JS),
    asset!("pipelines.js", JS),
    asset!("pipeline-run.js", JS),
    asset!("resources.js", JS),
    asset!("insights.css", "text/css; charset=utf-8"),
    asset!("daemons.js", JS),
    asset!("history.js", JS),
    asset!("charts.js", JS),
    asset!("tokens.js", JS),
    asset!("signin.js", JS),
];

/// A strong validator per file, computed once (FNV-1a over the bytes: the files are fixed for the binary's life).
static ETAGS: LazyLock<Vec<String>> = LazyLock::new(|| {
    ASSETS
        .iter()
        .map(|a| {
            let hash =
                a.body.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3));
            format!("\"{hash:016x}\"")
        })
        .collect()
});

/// The panel's routes: `/` (the page) and `/panel/<file>`. Generic over the state, so it merges into any router.
/// `policy` is the Content-Security-Policy of every answer ([`content_security_policy`]).
pub fn router<S: Clone + Send + Sync + 'static>(policy: &str) -> Router<S> {
    let policy = HeaderValue::from_str(policy).unwrap_or(HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    let at_index = policy.clone();
    Router::new()
        .route("/", get(move |headers: HeaderMap| async move { serve("index.html", &headers, &at_index) }))
        .route(
            "/panel/{*file}",
            get(move |Path(name): Path<String>, headers: HeaderMap| async move { serve(&name, &headers, &policy) }),
        )
}

fn serve(name: &str, request: &HeaderMap, policy: &HeaderValue) -> Response {
    let Some(i) = ASSETS.iter().position(|a| a.name == name) else {
        let mut response = (StatusCode::NOT_FOUND, "There is no such file in the panel.\n").into_response();
        secure(response.headers_mut(), policy);
        return response;
    };
    let asset = &ASSETS[i];
    let etag = &ETAGS[i];
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|tag| tag.trim().trim_start_matches("W/") == etag));
    let mut response = if fresh { StatusCode::NOT_MODIFIED.into_response() } else { asset.body.into_response() };
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    if let Ok(v) = HeaderValue::from_str(etag) {
        headers.insert(header::ETAG, v);
    }
    secure(headers, policy);
    response
}

fn secure(headers: &mut HeaderMap, policy: &HeaderValue) {
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::CONTENT_SECURITY_POLICY, policy.clone());
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_policy_allows_fetches_to_the_token_endpoint_origin_only_when_given() {
        let origin = super::origin_of("https://idp.example.org:8443/realms/a/token").expect("an origin");
        assert_eq!(origin, "https://idp.example.org:8443");
        let policy = super::content_security_policy(Some(&origin));
        assert!(policy.contains("connect-src 'self' https://idp.example.org:8443;"), "{policy}");
        assert!(super::content_security_policy(None).contains("connect-src 'self';"));
        assert_eq!(super::origin_of("javascript:alert(1)"), None);
    }

    use axum::body::Body;
    use tower::ServiceExt;

    use super::*;

    async fn get(path: &str, if_none_match: Option<&str>) -> Response {
        let mut request = axum::http::Request::get(path);
        if let Some(tag) = if_none_match {
            request = request.header(header::IF_NONE_MATCH, tag);
        }
        router::<()>(CONTENT_SECURITY_POLICY)
            .oneshot(request.body(Body::empty()).expect("request"))
            .await
            .expect("infallible")
    }

    #[tokio::test]
    async fn the_page_and_its_files_are_served_with_their_type_and_a_strict_policy() {
        for (path, kind) in [("/", "text/html"), ("/panel/app.js", "text/javascript"), ("/panel/style.css", "text/css")]
        {
            let response = get(path, None).await;
            assert_eq!(response.status(), StatusCode::OK, "{path}");
            let h = response.headers();
            assert!(h[header::CONTENT_TYPE].to_str().expect("ascii").starts_with(kind), "{path}");
            assert_eq!(h[header::CACHE_CONTROL], "no-cache", "{path}");
            assert!(h[header::CONTENT_SECURITY_POLICY].to_str().expect("ascii").starts_with("default-src 'self'"));
        }
    }

    #[tokio::test]
    async fn a_known_etag_answers_not_modified_and_an_unknown_file_is_a_404() {
        let etag = get("/panel/app.js", None).await.headers()[header::ETAG].to_str().expect("ascii").to_owned();
        assert_eq!(get("/panel/app.js", Some(&etag)).await.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(get("/panel/../Cargo.toml", None).await.status(), StatusCode::NOT_FOUND);
        assert_eq!(get("/panel/nope.js", None).await.status(), StatusCode::NOT_FOUND);
    }

    #[test]
    fn every_module_the_page_imports_is_served() {
        // A module that is imported but not listed would fail in the browser only; catch it here.
        for asset in ASSETS.iter().filter(|a| a.name.ends_with(".js") || a.name.ends_with(".html")) {
            let text = std::str::from_utf8(asset.body).expect("utf-8");
            let references = text.split("from \"./").skip(1);
            let references =
                references.chain(text.split("src=\"/panel/").skip(1)).chain(text.split("href=\"/panel/").skip(1));
            for import in references {
                let name = import.split('"').next().unwrap_or_default();
                assert!(ASSETS.iter().any(|a| a.name == name), "{} imports {name}, which is not served", asset.name);
            }
        }
    }
}
