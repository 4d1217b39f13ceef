//! Roles and bearer tokens. Tokens are configured as SHA-256 hashes, never in plain text: a token is a long
//! random secret, so a plain hash is enough (there is nothing to brute-force), and checking costs microseconds.

use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

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
