//! Why someone changed something: every audited change (an override, a resource's capacity, a schedule) carries
//! a reason kept in its audit trail. [`Reason`] is that text once checked, so the API, the domain and the CLI
//! refuse the same reasons with the same sentences, and code that holds a `Reason` need not check it again.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The longest reason accepted, in characters.
pub const MAX_REASON: usize = 2000;

/// A reason as stored: trimmed, not empty, at most [`MAX_REASON`] characters, without NUL (which PostgreSQL
/// cannot store as text).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct Reason(String);

/// Why a reason was refused; each displays as a sentence for the person who gave it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReasonError {
    /// No reason, or only spaces. `changes` names what the reason is for ("the schedule").
    #[error("A reason is required: say in `reason` why {changes} changes; it is kept in the audit trail.")]
    Required {
        /// What the reason is for, as it reads after "why".
        changes: &'static str,
    },
    /// The reason holds a NUL character.
    #[error("The reason must not contain a NUL character (\\u0000); it is kept as text in the audit trail.")]
    HasNul,
    /// The reason is longer than [`MAX_REASON`] characters.
    #[error("The reason must be at most {MAX_REASON} characters.")]
    TooLong,
}

impl ReasonError {
    /// The machine-readable code the API answers with (`reason_required`, `reason_invalid`, `reason_too_long`).
    pub fn code(&self) -> &'static str {
        match self {
            Self::Required { .. } => "reason_required",
            Self::HasNul => "reason_invalid",
            Self::TooLong => "reason_too_long",
        }
    }
}

impl Reason {
    /// The reason `given` (absent when the caller gave none) for a change of `changes` ("the override", "the
    /// capacity", "the schedule": it completes the sentence of a missing reason), trimmed.
    pub fn new(given: Option<&str>, changes: &'static str) -> Result<Self, ReasonError> {
        let reason = given.map(str::trim).unwrap_or_default();
        if reason.is_empty() {
            return Err(ReasonError::Required { changes });
        }
        if reason.contains('\0') {
            return Err(ReasonError::HasNul);
        }
        if reason.chars().count() > MAX_REASON {
            return Err(ReasonError::TooLong);
        }
        Ok(Self(reason.to_owned()))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for Reason {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

// A checked reason is read wherever text is (the audit rows take `&str`); it can only be made by `new`.
impl std::ops::Deref for Reason {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

/// The body of a change that needs nothing but a reason: clearing an override, pausing, resuming or deleting a
/// schedule. The reason may come in the body or as `?reason=`; the body's wins.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct ReasonBody {
    /// Why (required, recorded in the audit trail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ReasonBody {
    /// A body with `reason`.
    pub fn new(reason: impl Into<String>) -> Self {
        Self { reason: Some(reason.into()) }
    }

    /// The body's reason, else the query's (`?reason=`).
    pub fn or_query(self, query: Self) -> Option<String> {
        self.reason.or(query.reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_is_trimmed_and_refused_when_empty_long_or_holding_nul() {
        let of = |given: Option<&str>| Reason::new(given, "the schedule");
        assert_eq!(of(Some(" more GPUs ")).map(|r| r.to_string()), Ok("more GPUs".to_owned()));
        assert_eq!(of(None), Err(ReasonError::Required { changes: "the schedule" }));
        assert_eq!(of(Some("   ")), Err(ReasonError::Required { changes: "the schedule" }));
        assert_eq!(of(Some("a\0b")), Err(ReasonError::HasNul));
        assert_eq!(of(Some(&"x".repeat(MAX_REASON + 1))), Err(ReasonError::TooLong));
        assert!(of(Some(&"é".repeat(MAX_REASON))).is_ok(), "characters are counted, not bytes");
        let required = of(None).expect_err("refused").to_string();
        assert!(required.contains("why the schedule changes"), "{required}");
    }
}
