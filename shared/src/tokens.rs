//! Service tokens, the domain: tokens an admin creates, lists and revokes through the API without a restart, kept
//! in the database as hashes (the `sha256:` form of `[[auth.tokens]]`), and [`TokenMap`], the in-memory copy each
//! API process checks bearers against.
//!
//! Why an in-memory map rather than a database read per request: a request with a service token then costs no
//! extra round trip (the map is a hash lookup), a database that is slow or briefly away does not slow every
//! authenticated request down, and uses are counted in memory and written once a second per token instead of once
//! per request. The price is a bounded delay: a token created or revoked through one process is honoured or
//! refused by every other within a second; the process that made the change applies it to its own map at once.
//!
//! How the map stays current: on PostgreSQL a trigger notifies `{"kind":"tokens"}` on the change feed's channel
//! whenever a token is created, revoked or deleted, and every API process re-reads the tokens when it hears it (and
//! after each resync of its feed, when notifications may have been lost), plus once every [`FALLBACK_EVERY`] in
//! case one went astray: an idle API leaves the database alone. Where no notification can arrive it polls instead,
//! re-reading them every [`REFRESH_EVERY`]: while the feed is not connected (before its first connection, while it
//! reconnects), on SQLite, which cannot notify, and behind a pooler without `database.listen_url`, where the feed
//! polls snapshots of other tables. One small read four times a second per process is nothing to either backend,
//! and it keeps revocation within the second everywhere. A read is one statement, which brings the database clock
//! along: expiry is judged by it, each read recording the offset of the database's clock from the process's, and a
//! check adding it.
//!
//! When the reads fail, the map is not trusted for long: see [`is_stale`]. Service tokens are then answered
//! "cannot be checked" (503) rather than judged on old data that might miss a revocation.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{Mutex, PoisonError, RwLock},
    time::{Duration, Instant},
};

use chrono::{DateTime, NaiveDate, Utc};
use uuid::Uuid;

use crate::{
    DbError, Role, Store,
    auth::{CreatedToken, ServiceToken, hash_token, new_token},
    db,
};

/// How often an API process re-reads the tokens when no notification would tell it of a change (and while its
/// reads fail).
pub const REFRESH_EVERY: Duration = Duration::from_millis(250);
/// How often an API process re-reads the tokens while its feed hears notifications: only a safety net for a
/// notification that never came (a connection that died without saying so), so it can be slow.
pub const FALLBACK_EVERY: Duration = Duration::from_secs(30);
/// How often an API process writes the uses it counted.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// How long the reads of the tokens may go unanswered before service tokens are no longer judged by the map.
pub const STALE_AFTER: Duration = Duration::from_secs(5);
/// The longest name.
pub const MAX_NAME: usize = 64;

/// Why a token operation was refused; each displays as a sentence for people.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The name is empty, too long, or has characters outside the alphabet.
    #[error("The token name {0:?} must be 1 to 64 letters, digits, '-', '_', '.' or '@'.")]
    InvalidName(String),
    /// The name holds a control, bidirectional or invisible character, which would make the audit trail read
    /// differently from what was recorded.
    #[error(
        "The token name {name:?} contains U+{code:04X}, a control or invisible character that changes how text is displayed; names reach audit trails, so use letters, digits, '-', '_', '.' or '@'."
    )]
    UnsafeName {
        /// The name as given (printed escaped).
        name: String,
        /// The first such character's code point.
        code: u32,
    },
    /// The name is a configured token's, or `anonymous`: the audit trail would not tell them apart.
    #[error("The name {0:?} is taken by a token of the configuration (or reserved); choose another name.")]
    NameReserved(String),
    /// Another service token (perhaps a revoked one) has this name.
    #[error(
        "A service token named {0:?} exists already (names stay unique after a revocation, so that the audit trail names one token); choose another name."
    )]
    NameTaken(String),
    /// Not a role.
    #[error("The role {0:?} is not one of viewer, operator, admin.")]
    InvalidRole(String),
    /// Not a time.
    #[error("The expiry {0:?} is not a date (2027-01-31, midnight UTC) or an RFC 3339 time (2027-01-31T12:00:00Z).")]
    InvalidExpiry(String),
    /// A time that has passed.
    #[error("The expiry {0} has passed already; give a time in the future, or none for a token that does not expire.")]
    ExpiryPassed(DateTime<Utc>),
    /// No token has this id.
    #[error("There is no service token {0}; GET /api/tokens lists them.")]
    NotFound(Uuid),
    /// The token was revoked before.
    #[error("The service token {name:?} was revoked already, at {at} by {by}.")]
    AlreadyRevoked {
        /// Its name.
        name: String,
        /// When.
        at: DateTime<Utc>,
        /// By whom.
        by: String,
    },
    /// The database failed.
    #[error(transparent)]
    Database(#[from] DbError),
}

/// Checks a token's name: 1 to [`MAX_NAME`] characters of letters, digits, `-`, `_`, `.`, `@`.
pub fn check_name(name: &str) -> Result<(), TokenError> {
    if let Some(c) = crate::names::unsafe_char(name) {
        return Err(TokenError::UnsafeName { name: name.to_owned(), code: u32::from(c) });
    }
    let ok = !name.is_empty()
        && name.chars().count() <= MAX_NAME
        && name.chars().all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | '@'));
    if ok { Ok(()) } else { Err(TokenError::InvalidName(name.to_owned())) }
}

/// Reads a role's name.
pub fn parse_role(role: &str) -> Result<Role, TokenError> {
    role.parse().map_err(|_| TokenError::InvalidRole(role.to_owned()))
}

/// Reads an expiry: an RFC 3339 time, or a date (its midnight, UTC).
pub fn parse_expiry(text: &str) -> Result<DateTime<Utc>, TokenError> {
    let text = text.trim();
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Ok(at.with_timezone(&Utc));
    }
    NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
        .ok_or_else(|| TokenError::InvalidExpiry(text.to_owned()))
}

/// What an admin asks for.
#[derive(Debug, Clone)]
pub struct NewToken {
    /// Its name (the actor of its writes).
    pub name: String,
    /// Its role.
    pub role: Role,
    /// When it expires, if ever.
    pub expires_at: Option<DateTime<Utc>>,
}

impl Store {
    /// Creates a service token by `actor`; `reserved` are the names it may not take (the configured tokens').
    /// Answers the secret, which is stored only as its hash.
    pub(crate) async fn create_token(
        &self,
        token: &NewToken,
        actor: &str,
        reserved: &[&str],
    ) -> Result<CreatedToken, TokenError> {
        check_name(&token.name)?;
        if token.name == "anonymous" || reserved.contains(&token.name.as_str()) {
            return Err(TokenError::NameReserved(token.name.clone()));
        }
        if let Some(at) = token.expires_at
            && at <= self.now().await?
        {
            return Err(TokenError::ExpiryPassed(at));
        }
        let secret = new_token();
        let hash = hash_token(&secret);
        let created =
            db::tokens::insert(&self.db, Uuid::now_v7(), &token.name, token.role, &hash, actor, token.expires_at)
                .await?
                .ok_or_else(|| TokenError::NameTaken(token.name.clone()))?;
        Ok(CreatedToken { token: created, secret })
    }

    /// Every service token, oldest first, revoked ones included; never a secret.
    pub(crate) async fn list_tokens(&self) -> Result<Vec<ServiceToken>, DbError> {
        self.db.retrying(|| db::tokens::list(&self.db)).await
    }

    /// Revokes a service token by `actor`: it is refused from then on (by every API process within a second).
    pub(crate) async fn revoke_token(&self, id: Uuid, actor: &str) -> Result<ServiceToken, TokenError> {
        if let Some(revoked) = db::tokens::revoke(&self.db, id, actor).await? {
            return Ok(revoked);
        }
        match db::tokens::get(&self.db, id).await? {
            Some(ServiceToken { name, revoked_at: Some(at), revoked_by, .. }) => {
                Err(TokenError::AlreadyRevoked { name, at, by: revoked_by.unwrap_or_default() })
            }
            _ => Err(TokenError::NotFound(id)),
        }
    }
}

/// What the map says of a bearer's hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// A live token: its holder's name and role.
    Accepted {
        /// The name.
        name: String,
        /// The role.
        role: Role,
    },
    /// The token expired.
    Expired {
        /// Its name.
        name: String,
        /// When.
        at: DateTime<Utc>,
    },
    /// The token was revoked.
    Revoked {
        /// Its name.
        name: String,
        /// When.
        at: DateTime<Utc>,
    },
    /// The map has no such token.
    Unknown,
    /// The map is too old to judge by (see [`is_stale`]).
    Stale,
}

/// Whether a map may no longer be judged by, at `now`. `refreshed` is when its last successful read began (`None`
/// before the first), `unanswered` when the first read since then began that has not succeeded (`None` once one
/// has): one that failed, or that the database has not answered yet.
///
/// Stale when the reads have gone unanswered for longer than [`STALE_AFTER`]: the database is away, and a
/// revocation may have been missed. Also when the map is older than [`FALLBACK_EVERY`] + [`STALE_AFTER`], whatever
/// the reads said: the refresher reads at least every `FALLBACK_EVERY`, so only a refresher that stopped reading
/// gets there. How often it reads otherwise does not matter: a map that is read only when a notification says the
/// tokens changed is as current as one read four times a second, so an old map whose last read succeeded is not
/// stale as long as that bound holds.
pub fn is_stale(now: Instant, refreshed: Option<Instant>, unanswered: Option<Instant>) -> bool {
    let older_than = |at: Instant, limit: Duration| now.saturating_duration_since(at) > limit;
    unanswered.is_some_and(|at| older_than(at, STALE_AFTER))
        || refreshed.is_some_and(|at| older_than(at, FALLBACK_EVERY + STALE_AFTER))
}

/// Whether the refresher reads the tokens now: when it was told they changed or may have (`woken`: a
/// notification, a resync of the feed), while its reads fail (`failing`: until one succeeds), while no notification
/// would reach it (`listening` false: it polls every [`REFRESH_EVERY`]), and otherwise once the last read is
/// [`FALLBACK_EVERY`] old (`since_read`).
pub fn read_due(woken: bool, failing: bool, listening: bool, since_read: Duration) -> bool {
    woken || failing || !listening || since_read >= FALLBACK_EVERY
}

#[derive(Debug, Default)]
struct Known {
    by_hash: HashMap<String, Entry>,
    /// Database clock minus this process's clock, at the last refresh.
    offset: chrono::TimeDelta,
    /// When the last successful read began; `None` before the first.
    refreshed: Option<Instant>,
    /// When the first read since the last success began, while none has succeeded (see [`is_stale`]).
    unanswered: Option<Instant>,
}

#[derive(Debug, Clone)]
struct Entry {
    id: Uuid,
    name: String,
    role: Role,
    expires_at: Option<DateTime<Utc>>,
    revoked_at: Option<DateTime<Utc>>,
}

/// The service tokens as one API process knows them: refreshed from the database by [`TokenMap::refresh`] (the
/// API's background task calls it when [`read_due`] says so), changed at once by the process's own creations and
/// revocations, with the uses counted for [`TokenMap::flush_uses`].
#[derive(Debug, Default)]
pub struct TokenMap {
    known: RwLock<Known>,
    used: Mutex<BTreeSet<Uuid>>,
}

impl TokenMap {
    /// Judges a bearer by its hash, and counts a use of an accepted one.
    pub fn check(&self, hash: &str) -> Check {
        let known = self.known.read().unwrap_or_else(PoisonError::into_inner);
        if is_stale(Instant::now(), known.refreshed, known.unanswered) {
            return Check::Stale;
        }
        let Some(entry) = known.by_hash.get(hash) else { return Check::Unknown };
        if let Some(at) = entry.revoked_at {
            return Check::Revoked { name: entry.name.clone(), at };
        }
        let now = Utc::now() + known.offset;
        if let Some(at) = entry.expires_at.filter(|at| *at <= now) {
            return Check::Expired { name: entry.name.clone(), at };
        }
        self.used.lock().unwrap_or_else(PoisonError::into_inner).insert(entry.id);
        Check::Accepted { name: entry.name.clone(), role: entry.role }
    }

    /// Whether the last read failed (or has not been answered yet).
    pub fn is_failing(&self) -> bool {
        self.known.read().unwrap_or_else(PoisonError::into_inner).unanswered.is_some()
    }

    /// Re-reads every token from the database.
    pub async fn refresh(&self, store: &Store) -> Result<(), DbError> {
        let started = Instant::now();
        // Marked before the read, so that a read the database never answers makes the map stale too.
        self.known.write().unwrap_or_else(PoisonError::into_inner).unanswered.get_or_insert(started);
        let (rows, db_now) = db::tokens::snapshot(&store.db).await?;
        let offset = db_now - Utc::now();
        let by_hash = rows
            .into_iter()
            .map(|r| {
                let entry =
                    Entry { id: r.id, name: r.name, role: r.role, expires_at: r.expires_at, revoked_at: r.revoked_at };
                (r.hash, entry)
            })
            .collect();
        // The read's start, not its end: the rows may be as old as that.
        *self.known.write().unwrap_or_else(PoisonError::into_inner) =
            Known { by_hash, offset, refreshed: Some(started), unanswered: None };
        Ok(())
    }

    /// Applies this process's own creation at once, before the next refresh.
    pub fn created(&self, created: &CreatedToken) {
        let t = &created.token;
        let entry = Entry { id: t.id, name: t.name.clone(), role: t.role, expires_at: t.expires_at, revoked_at: None };
        let mut known = self.known.write().unwrap_or_else(PoisonError::into_inner);
        known.by_hash.insert(hash_token(&created.secret), entry);
    }

    /// Applies this process's own revocation at once, before the next refresh.
    pub fn revoked(&self, token: &ServiceToken) {
        let mut known = self.known.write().unwrap_or_else(PoisonError::into_inner);
        for entry in known.by_hash.values_mut().filter(|e| e.id == token.id) {
            entry.revoked_at = token.revoked_at.or(Some(Utc::now()));
        }
    }

    /// Writes the uses counted since the last call (`last_used_at`); on failure they are counted again next time.
    pub async fn flush_uses(&self, store: &Store) -> Result<(), DbError> {
        let ids: Vec<Uuid> =
            std::mem::take(&mut *self.used.lock().unwrap_or_else(PoisonError::into_inner)).into_iter().collect();
        if ids.is_empty() {
            return Ok(());
        }
        if let Err(e) = db::tokens::touch(&store.db, &ids).await {
            self.used.lock().unwrap_or_else(PoisonError::into_inner).extend(ids);
            return Err(e);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_roles_and_expiries_are_read_or_refused_with_a_sentence() {
        assert!(check_name("ci-deploy@prod.1").is_ok());
        for bad in ["", "with space", "a<b>", &"x".repeat(65)] {
            let e = check_name(bad).expect_err(bad);
            assert!(e.to_string().starts_with("The token name"), "{e}");
        }
        assert_eq!(parse_role("operator").expect("a role"), Role::Operator);
        assert!(parse_role("root").expect_err("not a role").to_string().contains("viewer, operator, admin"));
        assert_eq!(parse_expiry("2027-01-31").expect("a date").to_rfc3339(), "2027-01-31T00:00:00+00:00");
        assert_eq!(
            parse_expiry("2027-01-31T12:00:00+02:00").expect("a time").to_rfc3339(),
            "2027-01-31T10:00:00+00:00"
        );
        assert!(parse_expiry("next week").expect_err("not a time").to_string().contains("RFC 3339"));
    }

    #[test]
    fn a_map_is_stale_only_when_its_reads_go_unanswered_or_its_refresher_stopped() {
        let t0 = Instant::now();
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        // Never read, nothing tried: empty, not stale (every service token is unknown).
        assert!(!is_stale(at(100), None, None));
        // Read once, the feed quiet since: not stale for as long as the fallback read keeps it fresh.
        assert!(!is_stale(at(29), Some(t0), None));
        assert!(!is_stale(at(35), Some(t0), None));
        // The refresher stopped reading: stale once the fallback period and the grace have passed.
        assert!(is_stale(at(36), Some(t0), None));
        // A read began at 30 s and has not succeeded: fine for STALE_AFTER, then stale.
        assert!(!is_stale(at(33), Some(t0), Some(at(30))));
        assert!(!is_stale(at(35), Some(t0), Some(at(30))));
        assert!(is_stale(at(35) + Duration::from_millis(1), Some(t0), Some(at(30))));
        // Polling every 250 ms, the reads failing from the one after 10 s: a second later not yet stale; more
        // than five seconds later, stale.
        let failing_from = Some(at(10) + REFRESH_EVERY);
        assert!(!is_stale(at(11), Some(at(10)), failing_from));
        assert!(is_stale(at(16), Some(at(10)), failing_from));
        // Reads failing from the start: stale too, rather than every token unknown.
        assert!(is_stale(at(6), None, Some(t0)));
        // An instant before the marks (a clock read early) is never stale.
        assert!(!is_stale(t0, Some(at(1)), Some(at(1))));
    }

    #[test]
    fn the_tokens_are_read_when_told_while_failing_or_deaf_and_otherwise_at_the_fallback() {
        let recent = Duration::from_millis(300);
        // Listening, last read recent: nothing to do until told or until the fallback is due.
        assert!(!read_due(false, false, true, recent));
        assert!(read_due(true, false, true, recent));
        assert!(read_due(false, false, true, FALLBACK_EVERY));
        // Failing reads are retried at every tick.
        assert!(read_due(false, true, true, recent));
        // Not listening (no feed yet, reconnecting, SQLite, a pooler without listen_url): every tick.
        assert!(read_due(false, false, false, Duration::ZERO));
    }
}
