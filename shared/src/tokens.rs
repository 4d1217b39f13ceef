//! Service tokens, the domain: tokens an admin creates, lists and revokes through the API without a restart, kept
//! in the database as hashes (the `sha256:` form of `[[auth.tokens]]`), and [`TokenMap`], the in-memory copy each
//! API process checks bearers against.
//!
//! Why an in-memory map refreshed every 250 ms rather than a database read per request: a request with a service
//! token then costs no extra round trip (the map is a hash lookup), a database that is slow or briefly away does
//! not slow every authenticated request down, and uses are counted in memory and written once a second per token
//! instead of once per request. The price is a bounded delay: a token created or revoked through one process is
//! honoured or refused by every other within one refresh (250 ms, plus the read), well under the promised second;
//! the process that made the change applies it to its own map at once. Polling rather than the change feed
//! because it is the same on both backends, SQLite having no notifications, and one small read four times a second
//! per process is nothing to either. Expiry is judged by the database clock: each refresh records the offset of
//! the database's clock from the process's, and a check adds it.
//!
//! If the map could not be refreshed for [`STALE_AFTER`], service tokens are answered "cannot be checked" (503)
//! rather than judged on old data that might miss a revocation.

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

/// How often an API process re-reads the tokens.
pub const REFRESH_EVERY: Duration = Duration::from_millis(250);
/// How often an API process writes the uses it counted.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// How old the map may grow (failed refreshes) before service tokens are no longer judged by it.
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
    /// The map is too old to judge by: its refreshes have been failing for longer than [`STALE_AFTER`].
    Stale,
}

#[derive(Debug, Default)]
struct Known {
    by_hash: HashMap<String, Entry>,
    /// Database clock minus this process's clock, at the last refresh.
    offset: chrono::TimeDelta,
    /// When the last refresh succeeded; `None` before the first.
    refreshed: Option<Instant>,
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
/// API's background task calls it every [`REFRESH_EVERY`]), changed at once by the process's own creations and
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
        if known.refreshed.is_some_and(|at| at.elapsed() > STALE_AFTER) {
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

    /// Re-reads every token from the database.
    pub async fn refresh(&self, store: &Store) -> Result<(), DbError> {
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
        *self.known.write().unwrap_or_else(PoisonError::into_inner) =
            Known { by_hash, offset, refreshed: Some(Instant::now()) };
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
}
