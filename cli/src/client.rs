//! The HTTP client of the API: base URL, bearer token, timeouts, and the mapping of every failure to an
//! [`ApiFailure`] (the API answered with an error) or [`Unreachable`] (it did not answer). Plain HTTP reaches an
//! API on its own host; HTTPS (rustls, the system's certificate authorities plus `--ca-file`) reaches it through
//! the TLS-terminating reverse proxy that serves it to the network.

use std::{path::Path, time::Duration};

use anyhow::{Context, anyhow};
use reqwest::{
    Method, RequestBuilder, Response, Url,
    header::{AUTHORIZATION, HeaderValue},
};
use scrinalia_wire::ErrorBody;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use crate::exit::{ApiFailure, Unreachable};

/// How long an ordinary request may take; streams (logs) have no overall limit.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A client of one API.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    token: Option<HeaderValue>,
}

/// A successful answer, kept as text so that `--json` can print it as the API wrote it.
#[derive(Debug, Clone)]
pub struct Body {
    /// The HTTP status.
    pub status: reqwest::StatusCode,
    /// The body.
    pub text: String,
}

impl Body {
    /// The body as JSON.
    pub fn value(&self) -> anyhow::Result<Value> {
        serde_json::from_str(&self.text).context("the API's answer is not JSON")
    }

    /// The body as a `T`.
    pub fn parse<T: DeserializeOwned>(&self) -> anyhow::Result<T> {
        serde_json::from_str(&self.text)
            .with_context(|| format!("the API's answer does not have the expected shape: {}", snippet(&self.text)))
    }
}

impl Client {
    /// A client of the API at `api` (a base URL such as `http://127.0.0.1:8080` or `https://host/prefix`),
    /// sending `token` as a bearer token when given, and trusting the certificate authorities of `ca_file` (PEM)
    /// besides the system's.
    pub fn new(api: &str, token: Option<&str>, ca_file: Option<&Path>) -> anyhow::Result<Self> {
        let base = Url::parse(api.trim()).with_context(|| format!("--api {api:?} is not a URL"))?;
        if base.cannot_be_a_base() || !matches!(base.scheme(), "http" | "https") {
            return Err(anyhow!(
                "--api {api:?} must be an http:// or https:// URL such as http://127.0.0.1:8080 or https://host"
            ));
        }
        let token = match token.map(str::trim).filter(|t| !t.is_empty()) {
            Some(t) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {t}"))
                    .context("SCRINALIA_TOKEN contains characters that cannot be sent in an HTTP header")?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let mut http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .user_agent(concat!("scrinalia-cli/", env!("CARGO_PKG_VERSION")))
            .https_only(base.scheme() == "https");
        if let Some(path) = ca_file {
            let pem = std::fs::read(path).with_context(|| format!("--ca-file {}: cannot read it", path.display()))?;
            let authorities = reqwest::Certificate::from_pem_bundle(&pem)
                .ok()
                .filter(|c| !c.is_empty())
                .ok_or_else(|| anyhow!("--ca-file {}: holds no PEM certificate", path.display()))?;
            for authority in authorities {
                http = http.add_root_certificate(authority);
            }
        }
        let http = http.build().context("cannot build the HTTP client")?;
        Ok(Self { http, base, token })
    }

    /// The URL of `/api/<segments…>`; each segment is percent-encoded, so a name can never change the path.
    pub fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().push("api").extend(segments);
        }
        url
    }

    /// `GET /api/<segments>?<query>`.
    pub async fn get(&self, segments: &[&str], query: &[(&str, String)]) -> anyhow::Result<Body> {
        let request = self.request(Method::GET, segments).query(query).timeout(REQUEST_TIMEOUT);
        read(self.send(request).await?).await
    }

    /// `POST /api/<segments>` with an optional JSON body.
    pub async fn post<B: Serialize + ?Sized>(&self, segments: &[&str], body: Option<&B>) -> anyhow::Result<Body> {
        self.with_body(Method::POST, segments, body).await
    }

    /// `PUT /api/<segments>` with a JSON body.
    pub async fn put<B: Serialize + ?Sized>(&self, segments: &[&str], body: &B) -> anyhow::Result<Body> {
        self.with_body(Method::PUT, segments, Some(body)).await
    }

    /// `DELETE /api/<segments>` with an optional JSON body.
    pub async fn delete<B: Serialize + ?Sized>(&self, segments: &[&str], body: Option<&B>) -> anyhow::Result<Body> {
        self.with_body(Method::DELETE, segments, body).await
    }

    async fn with_body<B: Serialize + ?Sized>(
        &self,
        method: Method,
        segments: &[&str],
        body: Option<&B>,
    ) -> anyhow::Result<Body> {
        let mut request = self.request(method, segments).timeout(REQUEST_TIMEOUT);
        if let Some(body) = body {
            request = request.json(body);
        }
        read(self.send(request).await?).await
    }

    /// `GET` a streamed answer (a live log): only the connection has a timeout, not the whole answer.
    pub async fn stream(&self, segments: &[&str], query: &[(&str, String)]) -> anyhow::Result<Response> {
        let response = self.send(self.request(Method::GET, segments).query(query)).await?;
        if response.status().is_success() { Ok(response) } else { Err(failure(response).await) }
    }

    fn request(&self, method: Method, segments: &[&str]) -> RequestBuilder {
        let mut request = self.http.request(method, self.url(segments));
        if let Some(token) = &self.token {
            request = request.header(AUTHORIZATION, token.clone());
        }
        request
    }

    async fn send(&self, request: RequestBuilder) -> anyhow::Result<Response> {
        request.send().await.map_err(|e| self.unreachable(&e))
    }

    /// Turns a transport error into [`Unreachable`] with the innermost cause (e.g. "Connection refused").
    pub fn unreachable(&self, e: &reqwest::Error) -> anyhow::Error {
        if !(e.is_connect() || e.is_timeout() || e.is_request()) {
            return anyhow!("talking to the API at {}: {e}", self.base);
        }
        let mut cause: &dyn std::error::Error = e;
        while let Some(next) = cause.source() {
            cause = next;
        }
        let cause = if e.is_timeout() { "timed out".to_owned() } else { cause.to_string() };
        Unreachable { api: self.base.to_string(), cause }.into()
    }
}

async fn read(response: Response) -> anyhow::Result<Body> {
    let status = response.status();
    if !status.is_success() {
        return Err(failure(response).await);
    }
    let text = response.text().await.context("reading the API's answer")?;
    Ok(Body { status, text })
}

/// An error answer as an [`ApiFailure`]: the API's [`ErrorBody`] when it sent one, else the status and the
/// start of the body (e.g. from a proxy).
async fn failure(response: Response) -> anyhow::Error {
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    let parsed: Option<ErrorBody> = serde_json::from_str(&text).ok();
    let message = parsed.as_ref().map(|e| e.message.clone()).unwrap_or_else(|| {
        let reason = status.canonical_reason().unwrap_or("error");
        if text.trim().is_empty() {
            format!("the API answered {} {reason}.", status.as_u16())
        } else {
            format!("the API answered {} {reason}: {}", status.as_u16(), snippet(&text))
        }
    });
    ApiFailure { status, code: parsed.map(|e| e.code).unwrap_or_default(), message }.into()
}

/// The first line of a text, shortened, for messages.
fn snippet(text: &str) -> String {
    let line = text.trim().lines().next().unwrap_or_default();
    if line.chars().count() > 200 {
        format!("{}…", line.chars().take(200).collect::<String>())
    } else {
        line.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_a_prefix_and_encode_segments() {
        let client = Client::new("http://host:8080/scrinalia/", None, None).expect("a client");
        assert_eq!(
            client.url(&["workers", "a/b?c", "runs"]).as_str(),
            "http://host:8080/scrinalia/api/workers/a%2Fb%3Fc/runs"
        );
        let client = Client::new("http://127.0.0.1:8080", None, None).expect("a client");
        assert_eq!(client.url(&["health"]).as_str(), "http://127.0.0.1:8080/api/health");
    }

    #[test]
    fn bad_base_urls_and_tokens_are_refused() {
        assert!(Client::new("localhost:8080", None, None).is_err());
        assert!(Client::new("ftp://host", None, None).is_err());
        assert!(Client::new("https://host/prefix", None, None).is_ok());
        assert!(Client::new("http://host", Some("a\nb"), None).is_err());
        let missing = Client::new("https://host", None, Some(Path::new("/nonexistent/ca.pem"))).expect_err("no file");
        assert!(missing.to_string().contains("--ca-file /nonexistent/ca.pem"), "{missing}");
    }
}
