//! Where run output is kept: an object store (a local folder by default, or an S3 bucket on AWS or any
//! S3-compatible server), written in chunk objects while the run goes on so that it can be read before the run
//! ends. The daemon writes and the API reads through this one type, so both agree on the keys. A log over the
//! cap (`logs.max_bytes_per_run`) keeps its head and its tail, with a `<seq>.cut` object between them that states
//! the cut in the log's own line format.

use std::{fmt, sync::Arc, time::Duration};

use object_store::{
    BackoffConfig, ObjectStore, RetryConfig,
    aws::{AmazonS3Builder, AmazonS3ConfigKey},
    local::LocalFileSystem,
    path::Path,
};
use uuid::Uuid;

mod read;

pub use read::{Cursor, Next, Part, PartKind, Piece, Snapshot};

use crate::config::{DEFAULT_REGION, ObjectStoreKind, ObjectStoreSettings, Secret, clean_endpoint, s3_problems};

/// Why the store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum LogStoreError {
    /// The folder could not be created or opened.
    #[error("cannot open the run-log folder {path}: {source}")]
    Folder {
        /// The folder.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The store said no.
    #[error("object store: {0}")]
    Store(#[from] object_store::Error),
    /// A setting is missing or wrong; `key` is its full name, e.g. `object_store.endpoint`. The message never
    /// holds a secret.
    #[error("`{key}`: {message}")]
    Setting {
        /// The configuration key.
        key: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The S3 client could not be built from otherwise valid settings (or from the `AWS_*` environment).
    #[error("cannot set up the s3 object store (`object_store.*` and the AWS_* environment): {0}")]
    S3(object_store::Error),
}

/// An opened object store with the configured key prefix.
#[derive(Clone)]
pub struct LogStore {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    /// For an `s3` store, where it is, so that errors can say so.
    s3: Option<S3Place>,
}

/// An `s3` store's bucket and server, for messages.
#[derive(Clone, Debug)]
struct S3Place {
    bucket: String,
    server: String,
}

impl fmt::Debug for LogStore {
    // The store's own `Debug` would print an S3 access key id; its `Display` names only the bucket or folder.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogStore").field("store", &self.store.to_string()).field("prefix", &self.prefix).finish()
    }
}

impl LogStore {
    /// Opens the configured store; a local folder is created if missing.
    pub fn open(settings: &ObjectStoreSettings) -> Result<Self, LogStoreError> {
        let mut s3 = None;
        let store: Arc<dyn ObjectStore> = match settings.kind {
            ObjectStoreKind::Local => {
                let folder = |source| LogStoreError::Folder { path: settings.path.display().to_string(), source };
                std::fs::create_dir_all(&settings.path).map_err(folder)?;
                let root = std::fs::canonicalize(&settings.path).map_err(folder)?;
                Arc::new(LocalFileSystem::new_with_prefix(root)?)
            }
            ObjectStoreKind::S3 => {
                let builder = s3_builder(settings)?;
                let server = match builder.get_config_value(&AmazonS3ConfigKey::Endpoint) {
                    Some(endpoint) => endpoint,
                    None => format!(
                        "AWS S3 ({})",
                        builder.get_config_value(&AmazonS3ConfigKey::Region).as_deref().unwrap_or(DEFAULT_REGION)
                    ),
                };
                let bucket = builder.get_config_value(&AmazonS3ConfigKey::Bucket).unwrap_or_default();
                s3 = Some(S3Place { bucket, server });
                Arc::new(builder.build().map_err(LogStoreError::S3)?)
            }
        };
        Ok(Self { store, prefix: settings.prefix.trim_matches('/').to_owned(), s3 })
    }

    /// An error of the store as a readable phrase. An S3 server's answer is reduced to what it means (a missing
    /// bucket names `object_store.bucket`, refused keys name the key settings) instead of its XML body; a
    /// request that got no answer is reduced to its innermost cause ("Connection refused").
    pub fn explain(&self, error: &object_store::Error) -> String {
        let text = error.to_string();
        let Some(S3Place { bucket, server }) = &self.s3 else { return text };
        if let Some(code) = xml_field(&text, "Code") {
            let message = xml_field(&text, "Message").unwrap_or("no message");
            return match code {
                "NoSuchBucket" => format!("the bucket {bucket:?} does not exist at {server} (object_store.bucket)"),
                "InvalidAccessKeyId" | "SignatureDoesNotMatch" | "InvalidToken" | "ExpiredToken" => format!(
                    "{server} refused the credentials ({code}: {message}); check object_store.access_key_id and \
                     object_store.secret_access_key"
                ),
                "AccessDenied" | "AllAccessDisabled" => {
                    format!("{server} denied access to the bucket {bucket:?} ({code}: {message})")
                }
                _ => format!("{server} answered {code}: {message}"),
            };
        }
        let mut cause: &(dyn std::error::Error + 'static) = error;
        while let Some(source) = cause.source() {
            cause = source;
        }
        format!("the request to {server} failed: {cause}")
    }

    /// The store itself.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The key of one chunk of a run's log: `runs/<worker>/<run>/<seq>.log`. Worker names are identifiers, so
    /// nothing user-supplied reaches a path.
    pub fn chunk_key(&self, worker: &str, run: Uuid, seq: u32) -> Path {
        Path::from(format!("{}/{seq:08}.log", self.run_prefix_str(worker, run)))
    }

    /// The key of the statement of a cut by the log cap, `<seq>.cut`: it sorts after the head's last chunk
    /// (numbered below `seq`) and before every chunk of the tail (numbered `seq` and up).
    pub fn cut_key(&self, worker: &str, run: Uuid, seq: u32) -> Path {
        Path::from(format!("{}/{seq:08}.cut", self.run_prefix_str(worker, run)))
    }

    /// The folder of a run's log chunks.
    pub fn run_prefix(&self, worker: &str, run: Uuid) -> Path {
        Path::from(self.run_prefix_str(worker, run))
    }

    fn run_prefix_str(&self, worker: &str, run: Uuid) -> String {
        if self.prefix.is_empty() {
            format!("runs/{worker}/{run}")
        } else {
            format!("{}/runs/{worker}/{run}", self.prefix)
        }
    }

    /// The key used by health checks.
    pub fn probe_key(&self) -> Path {
        let name = format!("health/probe-{}", Uuid::new_v4());
        if self.prefix.is_empty() { Path::from(name) } else { Path::from(format!("{}/{name}", self.prefix)) }
    }
}

/// The line, in the log's format, that states what the cap `cap` cut at its place: `bytes` of output in `lines`
/// lines, written at `at` (RFC 3339).
pub fn cut_line(at: &str, bytes: u64, lines: u64, cap: u64) -> String {
    let (head, tail) = halves(cap);
    let s = if lines == 1 { "" } else { "s" };
    format!(
        "{at} scrinalia … {} bytes ({} line{s}) cut here by the log cap of {} (logs.max_bytes_per_run): the log \
         keeps the first {} and the last {} of the run's output …\n",
        grouped(bytes),
        grouped(lines),
        size_text(cap),
        size_text(head),
        size_text(tail)
    )
}

/// The line a followed log sends where the cap dropped output before the reader got it.
pub fn dropped_line(at: &str) -> String {
    format!(
        "{at} scrinalia … output cut here by the log cap before this reader got it (the stored log says how much) …\n"
    )
}

/// The cap's head and tail: the first half and the rest.
pub fn halves(cap: u64) -> (u64, u64) {
    (cap / 2, cap - cap / 2)
}

/// `n` with a comma between thousands: `812,345,678`.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

/// A size as people write it: `64 MiB`, `256 KiB`, `1.5 GiB`, or bytes below 1 KiB.
pub fn size_text(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (unit, name) in UNITS {
        if bytes >= unit {
            return if bytes.is_multiple_of(unit) {
                format!("{} {name}", bytes / unit)
            } else {
                #[allow(clippy::cast_precision_loss)]
                let value = bytes as f64 / unit as f64;
                format!("{value:.1} {name}")
            };
        }
    }
    format!("{bytes} bytes")
}

/// How long the S3 client keeps retrying one request. The library's default (ten tries over three minutes)
/// would hold a log reader of the API, or a health check, far beyond the caller's own timeouts.
fn s3_retry() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            base: 2.0,
        },
        max_retries: 3,
        retry_timeout: Duration::from_secs(15),
    }
}

/// The S3 client's builder for `settings`, or the first problem of [`s3_problems`].
///
/// With both keys configured, only the configuration is used. With neither, the builder starts from
/// `AmazonS3Builder::from_env()`, which reads every `AWS_*` variable it knows (`AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`/`AWS_DEFAULT_REGION`, `AWS_ENDPOINT`, …); when those
/// hold no keys either, the client falls back to web identity, container (ECS/EKS) and then instance-metadata
/// credentials, fetched at the first request. Configured values win over the environment in both cases, and
/// configured keys never mix with an `AWS_SESSION_TOKEN` meant for other keys.
pub fn s3_builder(settings: &ObjectStoreSettings) -> Result<AmazonS3Builder, LogStoreError> {
    if let Some((key, message)) = s3_problems(settings).into_iter().next() {
        return Err(LogStoreError::Setting { key, message });
    }
    let exposed = |s: &Option<Secret>| s.as_ref().map(|k| k.expose().to_owned()).filter(|k| !k.is_empty());
    let keys = exposed(&settings.access_key_id).zip(exposed(&settings.secret_access_key));
    let from_env = keys.is_none();
    let mut builder = match keys {
        Some((key_id, secret)) => AmazonS3Builder::new().with_access_key_id(key_id).with_secret_access_key(secret),
        None => AmazonS3Builder::from_env(),
    };
    let bucket = settings.bucket.as_deref().unwrap_or_default().trim();
    builder = builder.with_bucket_name(bucket).with_retry(s3_retry());
    match settings.region.as_deref().map(str::trim) {
        Some(region) => builder = builder.with_region(region),
        None if !from_env => builder = builder.with_region(DEFAULT_REGION),
        // AWS_REGION or AWS_DEFAULT_REGION when set; otherwise the builder itself falls back to us-east-1.
        None => {}
    }
    if let Some(endpoint) = settings.endpoint.as_deref().map(clean_endpoint) {
        // S3-compatible servers (MinIO, Ceph, moto) are addressed as `<endpoint>/<bucket>/<key>`: the bucket is
        // rarely resolvable as a subdomain of their host.
        builder = builder.with_endpoint(endpoint).with_virtual_hosted_style_request(false);
        if endpoint.starts_with("http://") {
            builder = builder.with_allow_http(true);
        }
    }
    Ok(builder)
}

/// The text of the first `<name>` element of an S3 error body within `text`.
fn xml_field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let start = text.find(&format!("<{name}>"))? + name.len() + 2;
    let len = text[start..].find(&format!("</{name}>"))?;
    Some(text[start..start + len].trim()).filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s3(endpoint: Option<&str>) -> ObjectStoreSettings {
        ObjectStoreSettings {
            kind: ObjectStoreKind::S3,
            bucket: Some("run-logs".to_owned()),
            endpoint: endpoint.map(str::to_owned),
            access_key_id: Some(Secret::from("AKIDEXAMPLEKEY".to_owned())),
            secret_access_key: Some(Secret::from("wJalrEXAMPLESECRET".to_owned())),
            prefix: "/scrinalia/".to_owned(),
            ..ObjectStoreSettings::default()
        }
    }

    #[test]
    fn an_s3_store_opens_without_a_request_and_never_prints_its_keys() {
        let store = LogStore::open(&s3(Some("http://127.0.0.1:9/"))).expect("opens");
        let printed = format!("{store:?}");
        assert!(printed.contains("run-logs"), "{printed}");
        assert!(!printed.contains("AKIDEXAMPLEKEY") && !printed.contains("wJalrEXAMPLESECRET"), "{printed}");
        let run = Uuid::nil();
        assert_eq!(store.chunk_key("tagger", run, 2).as_ref(), format!("scrinalia/runs/tagger/{run}/00000002.log"));
    }

    #[tokio::test]
    async fn an_unreachable_s3_server_is_explained_by_its_innermost_cause() {
        // A loopback port nothing listens on: bound, then released.
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a port").port();
        let endpoint = format!("http://127.0.0.1:{port}");
        let store = LogStore::open(&s3(Some(&endpoint))).expect("opens");
        let started = std::time::Instant::now();
        let error = store.store().put(&store.probe_key(), b"x".to_vec().into()).await.expect_err("nothing listens");
        assert!(started.elapsed() < Duration::from_secs(20), "retries are bounded: {:?}", started.elapsed());
        let explained = store.explain(&error);
        assert!(explained.starts_with(&format!("the request to {endpoint} failed: ")), "{explained}");
        assert!(explained.to_lowercase().contains("refused"), "{explained}");
    }

    #[test]
    fn a_cut_is_stated_in_numbers_people_read() {
        assert_eq!(grouped(812_345_678), "812,345,678");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_000), "1,000");
        assert_eq!(size_text(64 << 20), "64 MiB");
        assert_eq!(size_text(256 << 10), "256 KiB");
        assert_eq!(size_text(3 << 29), "1.5 GiB");
        assert_eq!(size_text(100), "100 bytes");
        let line = cut_line("2026-01-01T00:00:00.000Z", 812_345_678, 9_876_543, 64 << 20);
        assert_eq!(
            line,
            "2026-01-01T00:00:00.000Z scrinalia … 812,345,678 bytes (9,876,543 lines) cut here by the log cap of 64 \
             MiB (logs.max_bytes_per_run): the log keeps the first 32 MiB and the last 32 MiB of the run's output …\n"
        );
    }

    #[test]
    fn a_bad_s3_setting_is_refused_by_its_key() {
        let key_of = |settings: &ObjectStoreSettings| match LogStore::open(settings) {
            Err(LogStoreError::Setting { key, message }) => {
                assert!(!message.contains("SECRET") && !message.contains("AKID"), "{message}");
                key
            }
            other => panic!("expected a setting error, got {other:?}"),
        };
        assert_eq!(key_of(&s3(Some("ftp://127.0.0.1:9000"))), "object_store.endpoint");
        assert_eq!(key_of(&s3(Some("https://AKIDEXAMPLEKEY:wJalrEXAMPLESECRET@h"))), "object_store.endpoint");
        assert_eq!(key_of(&ObjectStoreSettings { bucket: None, ..s3(None) }), "object_store.bucket");
        let half = ObjectStoreSettings { secret_access_key: None, ..s3(None) };
        assert_eq!(key_of(&half), "object_store.secret_access_key");
        let message = LogStore::open(&half).expect_err("half the keys").to_string();
        assert_eq!(message, "`object_store.secret_access_key`: is needed with object_store.access_key_id");
    }
}
