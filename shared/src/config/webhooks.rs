//! `[[webhooks]]`: where the daemons announce the run outcomes people want to hear about (a failure, an
//! interruption, a recovery after one), signed as Standard Webhooks are. Checked at load, each problem with its
//! key, so a bad URL, an unknown event or worker, or a missing secret stops a process at start with a sentence;
//! the secret is read (from the file or `secret_file`) and decoded here once, and never printed.

use std::{fmt, path::PathBuf, time::Duration};

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::{Secret, redact_url};
use crate::catalogue::Catalogue;

/// What a secret is written as: Standard Webhooks' `whsec_` and the key in base64.
pub const SECRET_PREFIX: &str = "whsec_";
/// The shortest key accepted, in bytes (Standard Webhooks asks for 24 to 64 random bytes; 16 is the floor).
const MIN_KEY_BYTES: usize = 16;

/// The run outcomes a webhook can be subscribed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum WebhookEvent {
    /// A run failed (its worker exited with an error, or timed out).
    Failed,
    /// A run was interrupted (its daemon died or lost its lease, or it was stopped on shutdown).
    Interrupted,
    /// A run succeeded, and the previous run of its worker that ended with an outcome had failed or been
    /// interrupted.
    Recovered,
    /// A worker was paused: by itself after `pause_after_failures` failed runs in a row, or by hand.
    Paused,
}

impl WebhookEvent {
    /// Its name in the configuration and the ledger.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Failed => "failed",
            Self::Interrupted => "interrupted",
            Self::Recovered => "recovered",
            Self::Paused => "paused",
        }
    }
}

/// Read by name, so that an unknown one is answered with the names there are.
impl TryFrom<String> for WebhookEvent {
    type Error = String;

    fn try_from(name: String) -> Result<Self, String> {
        [Self::Failed, Self::Interrupted, Self::Recovered, Self::Paused]
            .into_iter()
            .find(|e| e.as_str() == name.trim())
            .ok_or_else(|| {
                format!("{name:?} is not a webhook event; use \"failed\", \"interrupted\", \"recovered\" or \"paused\"")
            })
    }
}

/// One `[[webhooks]]` entry as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSettings {
    /// How it is named in the API, the ledger and the metrics.
    pub name: String,
    /// Where the events are POSTed (`http://` or `https://`).
    pub url: String,
    /// The signing secret, `whsec_<base64>`; or `secret_file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<Secret>,
    /// A file holding the secret (e.g. a systemd credential), read at start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_file: Option<PathBuf>,
    /// Which outcomes: some of `failed`, `interrupted`, `recovered`, `paused`.
    pub events: Vec<WebhookEvent>,
    /// The workers whose runs count; empty means every worker.
    #[serde(default)]
    pub workers: Vec<String>,
    /// How long one attempt may take, connection included.
    #[serde(default = "default_timeout")]
    pub timeout_seconds: f64,
    /// How many attempts before a delivery is given up.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// The waits after the 1st, 2nd, … failed attempt; the last one repeats.
    #[serde(default = "default_retry_seconds")]
    pub retry_seconds: Vec<f64>,
}

fn default_timeout() -> f64 {
    10.0
}

fn default_max_attempts() -> u32 {
    8
}

fn default_retry_seconds() -> Vec<f64> {
    vec![10.0, 30.0, 120.0, 600.0, 1800.0, 3600.0]
}

/// A validated webhook, its key decoded.
#[derive(Clone)]
pub struct Webhook {
    /// Its name.
    pub name: String,
    /// Where events go.
    pub url: reqwest::Url,
    /// The outcomes it wants.
    pub events: Vec<WebhookEvent>,
    /// The workers it listens to; empty: all.
    pub workers: Vec<String>,
    /// One attempt's limit.
    pub timeout: Duration,
    /// Attempts before giving up.
    pub max_attempts: u32,
    /// Waits after failed attempts (the last repeats); never empty.
    pub retry: Vec<Duration>,
    key: Vec<u8>,
}

impl Webhook {
    /// The signing key (the secret's decoded bytes).
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// Whether an outcome `event` of a run of `worker` is for this webhook.
    pub fn wants(&self, event: WebhookEvent, worker: Option<&str>) -> bool {
        self.events.contains(&event)
            && (self.workers.is_empty() || worker.is_some_and(|w| self.workers.iter().any(|x| x == w)))
    }

    /// The wait after failed attempt `attempt` (1-based).
    pub fn retry_after(&self, attempt: u32) -> Duration {
        let i = usize::try_from(attempt.saturating_sub(1)).unwrap_or(usize::MAX).min(self.retry.len() - 1);
        self.retry[i]
    }

    /// The URL as a viewer may see it: its origin only, since a path or a query often holds a token (chat
    /// services' incoming-webhook URLs do).
    pub fn shown_url(&self) -> String {
        let origin = self.url.origin().ascii_serialization();
        if self.url.path() == "/" && self.url.query().is_none() { origin } else { format!("{origin}/…") }
    }
}

impl fmt::Debug for Webhook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Webhook")
            .field("name", &self.name)
            .field("url", &self.shown_url())
            .field("events", &self.events)
            .field("workers", &self.workers)
            .field("key", &"[redacted]")
            .finish_non_exhaustive()
    }
}

/// Decodes a `whsec_<base64>` secret into its key.
pub fn decode_secret(secret: &str) -> Result<Vec<u8>, String> {
    let Some(encoded) = secret.trim().strip_prefix(SECRET_PREFIX) else {
        return Err(format!(
            "must start with {SECRET_PREFIX:?} followed by the key in base64 (e.g. `echo whsec_$(openssl rand -base64 32)`)"
        ));
    };
    let key = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|e| format!("the part after {SECRET_PREFIX:?} is not base64 ({e})"))?;
    if key.len() < MIN_KEY_BYTES {
        return Err(format!("the key is {} bytes; use at least {MIN_KEY_BYTES} random bytes", key.len()));
    }
    Ok(key)
}

/// The webhooks of `raw`, validated against `catalogue`, and the problems found (each with its full key).
pub fn resolve_webhooks(raw: &[WebhookSettings], catalogue: &Catalogue) -> (Vec<Webhook>, Vec<(String, String)>) {
    let mut problems = Vec::new();
    let mut hooks = Vec::new();
    for (i, w) in raw.iter().enumerate() {
        let key = |field: &str| format!("webhooks[{i}].{field}");
        let before = problems.len();
        let name = w.name.trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
            problems.push((key("name"), "must be a name of letters, digits, '-', '_' or '.'".to_owned()));
        } else if raw[..i].iter().any(|o| o.name.trim() == name) {
            problems.push((key("name"), format!("{name:?} names another webhook already")));
        }
        let url = url_of(&w.url).map_err(|p| problems.push((key("url"), p))).ok();
        let secret = match (&w.secret, &w.secret_file) {
            (Some(_), Some(_)) => Err((key("secret"), "set secret or secret_file, not both".to_owned())),
            (None, None) => Err((key("secret"), "a webhook needs a signing secret (or secret_file)".to_owned())),
            (Some(s), None) if s.expose().trim().is_empty() => Err((key("secret"), "must not be empty".to_owned())),
            (Some(s), None) => decode_secret(s.expose()).map_err(|p| (key("secret"), p)),
            (None, Some(path)) => match std::fs::read_to_string(path) {
                Ok(text) if text.trim().is_empty() => Err((key("secret_file"), format!("{} is empty", path.display()))),
                Ok(text) => decode_secret(&text).map_err(|p| (key("secret_file"), format!("{}: {p}", path.display()))),
                Err(e) => Err((key("secret_file"), format!("cannot read {}: {e}", path.display()))),
            },
        };
        let secret = secret.map_err(|p| problems.push(p)).ok();
        if w.events.is_empty() {
            problems
                .push((key("events"), "name at least one of \"failed\", \"interrupted\", \"recovered\"".to_owned()));
        }
        for worker in w.workers.iter().filter(|n| catalogue.worker(n).is_none()) {
            problems.push((key("workers"), format!("{worker:?} is not a worker of the catalogue")));
        }
        if !(w.timeout_seconds.is_finite() && w.timeout_seconds > 0.0 && w.timeout_seconds <= 300.0) {
            problems.push((key("timeout_seconds"), "must be more than 0 and at most 300 seconds".to_owned()));
        }
        if w.max_attempts == 0 || w.max_attempts > 100 {
            problems.push((key("max_attempts"), "must be between 1 and 100".to_owned()));
        }
        if w.retry_seconds.is_empty() || w.retry_seconds.iter().any(|s| !(s.is_finite() && *s > 0.0 && *s <= 86_400.0))
        {
            problems
                .push((key("retry_seconds"), "must list waits of more than 0 and at most 86400 seconds".to_owned()));
        }
        if let (Some(url), Some(key), true) = (url, secret, problems.len() == before) {
            let mut events = w.events.clone();
            events.dedup();
            hooks.push(Webhook {
                name: name.to_owned(),
                url,
                events,
                workers: w.workers.clone(),
                timeout: Duration::from_secs_f64(w.timeout_seconds),
                max_attempts: w.max_attempts,
                retry: w.retry_seconds.iter().map(|s| Duration::from_secs_f64(*s)).collect(),
                key,
            });
        }
    }
    (hooks, problems)
}

/// The URL, if it is an http(s) URL with a host and no credentials.
fn url_of(text: &str) -> Result<reqwest::Url, String> {
    let shown = redact_url(text.trim());
    let url = reqwest::Url::parse(text.trim())
        .map_err(|e| format!("{shown:?} is not a URL ({e}); write e.g. \"https://hooks.example.com/scrinalia\""))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("{shown:?} is not an http:// or https:// URL"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("{shown:?} has no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not hold credentials: the signature authenticates the daemons to the receiver".to_owned());
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(edit: impl FnOnce(&mut WebhookSettings)) -> WebhookSettings {
        let mut w = WebhookSettings {
            name: "ops".into(),
            url: "https://hooks.example.com/x?token=1".into(),
            secret: Some(Secret::from("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned())),
            secret_file: None,
            events: vec![WebhookEvent::Failed],
            workers: Vec::new(),
            timeout_seconds: default_timeout(),
            max_attempts: default_max_attempts(),
            retry_seconds: default_retry_seconds(),
        };
        edit(&mut w);
        w
    }

    #[test]
    fn a_good_hook_resolves_and_hides_its_secret_and_path() {
        let (hooks, problems) = resolve_webhooks(&[hook(|_| {})], &Catalogue::default());
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(hooks[0].key().len(), 24);
        assert_eq!(hooks[0].shown_url(), "https://hooks.example.com/…");
        assert!(!format!("{:?}", hooks[0]).contains("token"));
        assert_eq!(hooks[0].retry_after(1), Duration::from_secs(10));
        assert_eq!(hooks[0].retry_after(99), Duration::from_secs(3600));
        assert!(hooks[0].wants(WebhookEvent::Failed, Some("any")));
        assert!(!hooks[0].wants(WebhookEvent::Recovered, Some("any")));
    }

    #[test]
    fn each_problem_is_named_by_its_key() {
        let mut bad = [
            hook(|w| w.url = "ftp://x".into()),
            hook(|w| w.secret = Some(Secret::from(String::new()))),
            hook(|w| w.secret = Some(Secret::from("hunter2".to_owned()))),
            hook(|w| w.workers = vec!["nope".into()]),
            hook(|w| w.events.clear()),
            hook(|w| w.secret = None),
        ];
        for (i, w) in bad.iter_mut().enumerate() {
            w.name = format!("hook-{i}");
        }
        let (hooks, problems) = resolve_webhooks(&bad, &Catalogue::default());
        assert!(hooks.is_empty());
        let keys: Vec<&str> = problems.iter().map(|p| p.0.as_str()).collect();
        assert_eq!(
            keys,
            [
                "webhooks[0].url",
                "webhooks[1].secret",
                "webhooks[2].secret",
                "webhooks[3].workers",
                "webhooks[4].events",
                "webhooks[5].secret"
            ]
        );
        assert!(problems.iter().all(|p| !p.1.contains("hunter2")), "{problems:?}");
    }
}
