//! `[database]`: where the ledger is, how many connections, and whether a pooler sits in front. Its `Debug`
//! and [`redact_url`] keep the password out of every log.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where the database is.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseSettings {
    /// `postgres://…` or `sqlite://path` (created if missing).
    pub url: String,
    /// Connections per process.
    pub max_connections: u32,
    /// How long to wait for a connection before giving up.
    pub connect_timeout_seconds: u64,
    /// SQLite: how long a writer waits for the lock.
    pub busy_timeout_ms: u64,
    /// What sits between this process and PostgreSQL: `none` (a direct connection) or `transaction` (a pooler
    /// such as PgBouncer in transaction mode, which hands each transaction whatever server connection is free,
    /// so nothing may outlive a transaction: no cached prepared statements, no session state, no LISTEN).
    pub pooler: Pooler,
    /// With `pooler = "transaction"`: a direct `postgres://` URL (bypassing the pooler) on which the change feed
    /// LISTENs. Without one the feed polls, and the log and health say so.
    pub listen_url: Option<String>,
}

/// What sits between the processes and PostgreSQL (`database.pooler`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooler {
    /// Nothing: a session is a connection.
    #[default]
    None,
    /// A pooler in transaction mode (PgBouncer `pool_mode = transaction`).
    Transaction,
}

impl Default for DatabaseSettings {
    fn default() -> Self {
        Self {
            url: "sqlite://data/scrinalia.sqlite".to_owned(),
            max_connections: 10,
            connect_timeout_seconds: 5,
            busy_timeout_ms: 5_000,
            pooler: Pooler::None,
            listen_url: None,
        }
    }
}

impl DatabaseSettings {
    /// The URL with any password replaced, for logs and errors.
    pub fn redacted_url(&self) -> String {
        redact_url(&self.url)
    }
}

impl fmt::Debug for DatabaseSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatabaseSettings")
            .field("url", &self.redacted_url())
            .field("max_connections", &self.max_connections)
            .field("pooler", &self.pooler)
            .field("listen_url", &self.listen_url.as_deref().map(redact_url))
            .finish_non_exhaustive()
    }
}

/// `url` with every credential replaced by `***`, for logs and errors: the password of the user information
/// (`postgres://user:***@host/db`), all of it even when it holds `@`, `/` or `?`, and the value of each query
/// parameter that names a credential (`?password=***`, `sslpassword`, `passfile`, tokens, keys, secrets).
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return redact_query(url) };
    // A password may hold `@` (even `/` or `?`, unencoded): the host starts after the last `@` before the query,
    // or after the last `@` at all when the part before the first `?` has none.
    let before_query = rest.find('?').map_or(rest, |q| &rest[..q]);
    let at = before_query.rfind('@').or_else(|| rest.rfind('@'));
    // An `@` in a query value (`?password=p@ss`) is no user information: a user name holds no `/` or `?`.
    let user = |userinfo: &str| {
        let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
        (!user.contains(['/', '?'])).then(|| user.to_owned())
    };
    let Some((at, user)) = at.and_then(|at| Some((at, user(&rest[..at])?))) else {
        return format!("{scheme}://{}", redact_query(rest));
    };
    let (userinfo, host) = (&rest[..at], &rest[at + 1..]);
    let user = if userinfo.contains(':') { format!("{user}:***") } else { user };
    format!("{scheme}://{user}@{}", redact_query(host))
}

/// The query parameters of `text` (after its first `?`) whose name suggests a credential, with `***` values.
fn redact_query(text: &str) -> String {
    let Some((base, query)) = text.split_once('?') else { return text.to_owned() };
    let params: Vec<String> = query
        .split('&')
        .map(|param| match param.split_once('=') {
            Some((name, _)) if is_credential(name) => format!("{name}=***"),
            _ => param.to_owned(),
        })
        .collect();
    format!("{base}?{}", params.join("&"))
}

/// Parameter names that carry a credential or point at one: libpq's `password`, `sslpassword` and `passfile`,
/// and the usual spellings of tokens, keys and secrets.
fn is_credential(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["pass", "pwd", "secret", "token", "key", "credential", "signature"].iter().any(|w| name.contains(w))
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn the_password_of_the_user_information_is_hidden() {
        assert_eq!(redact_url("postgres://u:pw@host:5432/db"), "postgres://u:***@host:5432/db");
        assert_eq!(redact_url("postgres://u@host/db"), "postgres://u@host/db", "no password, nothing to hide");
        assert_eq!(redact_url("sqlite://data/scrinalia.sqlite"), "sqlite://data/scrinalia.sqlite");
        assert_eq!(redact_url("sqlite:data.db"), "sqlite:data.db");
    }

    #[test]
    fn a_password_holding_at_signs_is_hidden_whole() {
        let shown = redact_url("postgres://u:p@ss@host/db");
        assert_eq!(shown, "postgres://u:***@host/db");
        assert!(!shown.contains("ss@"), "{shown}");
        assert_eq!(
            redact_url("postgres://u:a@b@c@host/db?sslmode=require"),
            "postgres://u:***@host/db?sslmode=require"
        );
        assert_eq!(redact_url("postgres://u:p?w@d@host/db"), "postgres://u:***@host/db", "and a `?`");
        assert_eq!(redact_url("postgres://u:p/w@host/db"), "postgres://u:***@host/db", "and a `/`");
    }

    #[test]
    fn credential_query_parameters_are_hidden() {
        assert_eq!(
            redact_url("postgres://host/db?user=u&password=secret&sslmode=require"),
            "postgres://host/db?user=u&password=***&sslmode=require"
        );
        assert_eq!(
            redact_url("postgresql://u:pw@host/db?sslpassword=k&passfile=/root/.pgpass&application_name=x"),
            "postgresql://u:***@host/db?sslpassword=***&passfile=***&application_name=x"
        );
        assert_eq!(redact_url("postgres://host/db?PASSWORD=p@ss"), "postgres://host/db?PASSWORD=***");
        assert_eq!(
            redact_url("https://s3.example/bucket?X-Amz-Signature=abc&X-Amz-Credential=k"),
            "https://s3.example/bucket?X-Amz-Signature=***&X-Amz-Credential=***"
        );
        assert_eq!(redact_url("sqlite://data.db?mode=rwc"), "sqlite://data.db?mode=rwc");
    }

    #[test]
    fn both_at_once() {
        let shown = redact_url("postgres://u:p@ss@host/db?password=other&connect_timeout=5");
        assert_eq!(shown, "postgres://u:***@host/db?password=***&connect_timeout=5");
    }
}
