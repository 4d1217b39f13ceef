//! Roles and bearer tokens, service tokens as the API creates and lists them, and who the caller is. Tokens are
//! configured as SHA-256 hashes, never in plain text: a token is a long random secret, so a plain hash is enough
//! (there is nothing to brute-force), and checking costs microseconds.

use chrono::{DateTime, Utc};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::{Named, named};

/// What a caller may do; each role includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Read everything.
    Viewer,
    /// Also trigger and cancel runs.
    Operator,
    /// Also edit overrides and drain daemons.
    Admin,
}

impl Named for Role {
    const ALL: &'static [Self] = &[Self::Viewer, Self::Operator, Self::Admin];
    const NOUN: &'static str = "a role";
    const PLURAL: &'static str = "the roles";

    fn name(self) -> &'static str {
        match self {
            Self::Viewer => "viewer",
            Self::Operator => "operator",
            Self::Admin => "admin",
        }
    }
}
named!(Role);

/// `sha256:<hex>` of a token.
pub fn hash_token(token: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(token.as_bytes())))
}

/// Whether `s` has the shape of a token hash.
pub fn is_token_hash(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A new random token (256 bits), prefixed so that it is recognisable in a leaked file.
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("scr_{}", hex::encode(bytes))
}

/// Compares two hashes in constant time, so response timing does not reveal how much of a hash matched.
pub fn hashes_equal(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A service token an admin created through the API (`POST /api/tokens`), as listed: never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ServiceToken {
    /// Its id, for `DELETE /api/tokens/{id}`.
    pub id: Uuid,
    /// Who holds it; recorded as the actor of every write made with it. Unique for good.
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// The admin who created it.
    pub created_by: String,
    /// When (database clock).
    pub created_at: DateTime<Utc>,
    /// When it stops being accepted; never when `null`.
    pub expires_at: Option<DateTime<Utc>>,
    /// When it was last accepted, within about a second (API processes record uses in batches).
    pub last_used_at: Option<DateTime<Utc>>,
    /// When it was revoked; it is refused from then on.
    pub revoked_at: Option<DateTime<Utc>>,
    /// The admin who revoked it.
    pub revoked_by: Option<String>,
}

/// The answer to `POST /api/tokens`: the token, and its secret, shown this once.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreatedToken {
    /// The token as listed.
    #[serde(flatten)]
    pub token: ServiceToken,
    /// The secret (`scr_…`) to send as `Authorization: Bearer <secret>`. Only its hash is stored: it cannot be
    /// shown again.
    pub secret: String,
}

/// The answer to `GET /api/tokens`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ServiceTokens {
    /// Oldest first, revoked ones included.
    pub tokens: Vec<ServiceToken>,
}

/// What `POST /api/tokens` asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateTokenBody {
    /// Who will hold it (1 to 64 letters, digits, `-`, `_`, `.`, `@`); the actor of its writes. Unique for good.
    #[serde(default)]
    pub name: String,
    /// `viewer`, `operator` or `admin`.
    pub role: Option<String>,
    /// When it stops being accepted: an RFC 3339 time, or a date (its midnight, UTC). Never, when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

/// `GET /api/me`: the caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MeView {
    /// Who is calling, as recorded as the actor of its writes: a token's name, a signed-in person
    /// (`Display Name <subject>`), a person named by a trusted proxy (`user (via proxy)`), or `anonymous`.
    pub name: String,
    /// `viewer` reads; `operator` also triggers and cancels runs; `admin` also edits overrides and drains daemons.
    pub role: Role,
}

/// `GET /api/signin`: how a person signs in to the panel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SignInView {
    /// Signing in with the identity provider (authorization code with PKCE), when `[auth.oidc.panel]` is set;
    /// otherwise `null`, and the panel asks for a token.
    pub oidc: Option<OidcSignIn>,
}

/// The identity provider's side of the panel's sign-in: all public (the panel is a public client, no secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OidcSignIn {
    /// The issuer, to name it on the button.
    pub issuer: String,
    /// The client id the issuer knows the panel by.
    pub client_id: String,
    /// Where the person is sent to sign in.
    pub authorization_endpoint: String,
    /// Where the code is exchanged for an access token.
    pub token_endpoint: String,
    /// The scopes asked for.
    pub scope: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_token_hashes_to_a_valid_hash_that_matches_only_itself() {
        let token = new_token();
        let hash = hash_token(&token);
        assert!(is_token_hash(&hash));
        assert!(hashes_equal(&hash, &hash_token(&token)));
        assert!(!hashes_equal(&hash, &hash_token(&new_token())));
        assert!(!is_token_hash(&token));
    }

    #[test]
    fn roles_are_ordered_viewer_operator_admin() {
        assert!(Role::Viewer < Role::Operator && Role::Operator < Role::Admin);
    }
}
