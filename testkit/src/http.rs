//! HTTP as the tests and benchmarks see it: a free port for a binary to listen on, and the one reply type of
//! every request they send (in-process through the router, or over the network to a real binary).

use bytes::Bytes;
use reqwest::{StatusCode, header::HeaderMap};
use serde_json::Value;

/// A port nothing listens on (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// An answer.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
}

impl Reply {
    /// Reads a whole response.
    pub async fn read(response: reqwest::Response) -> reqwest::Result<Self> {
        let (status, headers) = (response.status(), response.headers().clone());
        Ok(Self { status, headers, body: response.bytes().await? })
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON (panics with the body when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{} answered a body that is not JSON ({e}): {}", self.status, self.text()))
    }

    /// A reply read off the wire as a status and a body (no headers).
    pub fn from_raw(status: u16, body: String) -> Self {
        let status = StatusCode::from_u16(status).unwrap_or_else(|e| panic!("{status} is not a status: {e}"));
        Self { status, headers: HeaderMap::new(), body: Bytes::from(body) }
    }

    /// Asserts the status, and for an error (`code` given) the API's JSON shape, that `code` and a message that
    /// is a sentence; returns the body.
    pub fn expect(&self, status: StatusCode, code: Option<&str>) -> Value {
        self.expect_of("the request", status, code)
    }

    /// As [`Reply::expect`], naming `what` was asked (a table's row) in every failed assertion.
    pub fn expect_of(&self, what: &str, status: StatusCode, code: Option<&str>) -> Value {
        assert_eq!(self.status, status, "{what}: unexpected status; body: {}", self.text());
        let body = self.json();
        if let Some(code) = code {
            assert_eq!(body["code"], code, "{what}: unexpected error code: {body}");
            assert_sentence(what, &body);
        }
        body
    }

    /// Asserts any 4xx with the API's JSON error body and a sentence; returns the body.
    pub fn client_error(&self) -> Value {
        self.client_error_of("the request")
    }

    /// As [`Reply::client_error`], naming `what` was asked (a table's row) in every failed assertion.
    pub fn client_error_of(&self, what: &str) -> Value {
        assert!(self.status.is_client_error(), "{what}: expected a 4xx, got {}: {}", self.status, self.text());
        let body = self.json();
        assert!(body["code"].as_str().is_some_and(|c| !c.is_empty()), "{what}: no code: {body}");
        assert_sentence(what, &body);
        body
    }
}

/// Asserts that an error body's message is a sentence a person can read.
fn assert_sentence(what: &str, body: &Value) {
    let message = body["message"].as_str().unwrap_or_else(|| panic!("{what}: no message: {body}"));
    assert!(message.ends_with('.') && message.len() > 10, "{what}: the message is not a sentence: {message:?}");
}
