//! Where run logs are kept, and what makes those settings unusable (checked at load, so that a bad bucket or
//! endpoint is reported with its key before any process starts).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{Secret, redact_url};

/// The region of an `s3` store whose configuration (and environment) names none: AWS's own default.
pub const DEFAULT_REGION: &str = "us-east-1";

/// Where run logs are kept.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ObjectStoreSettings {
    /// `local` (a folder) or `s3` (S3-compatible).
    pub kind: ObjectStoreKind,
    /// The folder, for `local`.
    pub path: PathBuf,
    /// The bucket, for `s3`.
    pub bucket: Option<String>,
    /// The endpoint, for S3-compatible stores other than AWS.
    pub endpoint: Option<String>,
    /// The region, for `s3`.
    pub region: Option<String>,
    /// Access key id, for `s3`.
    pub access_key_id: Option<Secret>,
    /// Secret access key, for `s3`.
    pub secret_access_key: Option<Secret>,
    /// A prefix for every key.
    pub prefix: String,
}

impl Default for ObjectStoreSettings {
    fn default() -> Self {
        Self {
            kind: ObjectStoreKind::Local,
            path: PathBuf::from("data/run-logs"),
            bucket: None,
            endpoint: None,
            region: None,
            access_key_id: None,
            secret_access_key: None,
            prefix: String::new(),
        }
    }
}

/// The kinds of object store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ObjectStoreKind {
    /// A local folder.
    Local,
    /// An S3-compatible store.
    S3,
}

/// What is wrong with the `s3` settings, each with its full key; empty when nothing is. Configuration
/// validation reports them all at load; [`LogStore::open`] refuses the first.
pub fn s3_problems(settings: &ObjectStoreSettings) -> Vec<(&'static str, String)> {
    let mut problems = Vec::new();
    let bucket = settings.bucket.as_deref().unwrap_or_default().trim();
    if bucket.is_empty() {
        problems.push(("object_store.bucket", "an s3 object store needs a bucket".to_owned()));
    } else if bucket.contains(['/', '?', '#']) || bucket.chars().any(char::is_whitespace) {
        // Only what would break the request URL is refused: S3-compatible servers differ in the finer rules.
        let message = "a bucket name has no '/', '?', '#' or spaces (a folder inside it goes in object_store.prefix)";
        problems.push(("object_store.bucket", message.to_owned()));
    }
    let set = |s: &Option<Secret>| s.as_ref().is_some_and(|k| !k.expose().is_empty());
    match (set(&settings.access_key_id), set(&settings.secret_access_key)) {
        (true, false) => {
            problems.push(("object_store.secret_access_key", "is needed with object_store.access_key_id".to_owned()))
        }
        (false, true) => {
            problems.push(("object_store.access_key_id", "is needed with object_store.secret_access_key".to_owned()))
        }
        _ => {}
    }
    if settings.region.as_deref().is_some_and(|r| r.trim().is_empty()) {
        problems.push(("object_store.region", format!("must not be empty; leave it out for {DEFAULT_REGION}")));
    }
    if let Some(problem) = settings.endpoint.as_deref().and_then(|e| endpoint_problem(clean_endpoint(e))) {
        problems.push(("object_store.endpoint", problem));
    }
    problems
}

/// The endpoint as the client gets it: no surrounding spaces, no trailing slash.
pub fn clean_endpoint(endpoint: &str) -> &str {
    endpoint.trim().trim_end_matches('/')
}

/// Why `endpoint` is not a usable S3 endpoint, if it is not: it must be an http(s) URL with a host.
fn endpoint_problem(endpoint: &str) -> Option<String> {
    let shown = redact_url(endpoint);
    let url = match reqwest::Url::parse(endpoint) {
        Ok(url) => url,
        Err(e) => return Some(format!("{shown:?} is not a URL ({e}); write e.g. \"http://127.0.0.1:9000\"")),
    };
    if !matches!(url.scheme(), "http" | "https") {
        return Some(format!("{shown:?} is not an http:// or https:// URL"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Some(format!("{shown:?} has no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Some("must not hold credentials: set object_store.access_key_id and secret_access_key".to_owned());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Some(format!("{shown:?} must not have a query or a fragment"));
    }
    None
}
