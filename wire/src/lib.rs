//! The types that cross a process boundary as JSON: the API's request and response bodies (runs, workers,
//! daemons, health, queue measurements, overrides, resources, schedules, pipelines, tokens, errors), resolved
//! configurations, live changes, roles and reasons. The API serialises them, the CLI reads them, and the
//! database layer of `scrinalia-shared` decodes its rows into them (feature `sqlx`), so the three cannot
//! disagree on a field.
//!
//! Nothing here opens a connection: the crate is small enough for the operator CLI to depend on.
#![warn(missing_docs)]

pub mod auth;
pub mod backlog;
pub mod bulk;
pub mod change;
pub mod choice;
pub mod daemon;
pub mod diff;
pub mod engine;
pub mod error;
pub mod health;
pub mod item;
pub mod overrides;
pub mod pause;
pub mod pipeline;
pub mod queue;
pub mod reason;
pub mod resource;
pub mod run;
pub mod schedule;
pub mod shard;
pub mod tag;
pub mod usage;
pub mod waiting;
pub mod worker;

pub use auth::{CreateTokenBody, CreatedToken, MeView, OidcSignIn, Role, ServiceToken, ServiceTokens, SignInView};
pub use backlog::{BacklogFire, BacklogFiresView, BacklogTrigger, Freshness};
pub use bulk::{
    BulkAction, BulkActionKind, BulkActions, BulkOutcome, BulkPreview, BulkReason, BulkRequest, BulkSample,
    BulkSnapshot, BulkState,
};
pub use change::Change;
pub use choice::{Choices, ExplicitArgs, OverrideValues, Resolved, ResolvedConfig, Source};
pub use daemon::{Daemon, DaemonLimits, DaemonState, DaemonsView};
pub use diff::{ConfigChange, Origin};
pub use engine::Engine;
pub use error::ErrorBody;
pub use health::{Check, HealthView, Status, StatusBody};
pub use item::{
    ChainItems, ItemCount, ItemError, ItemPage, ItemSummary, QuarantineRelease, QuarantineView, QuarantinedItem,
    ReleaseBody, RunItem,
};
pub use overrides::{AuditEntry, AuditView, Override, OverrideAction, OverrideChange, OverrideView};
pub use pause::{PauseAction, PauseEntry, PauseView, WorkerPause};
pub use pipeline::{PipelineRun, PipelineRunView, PipelineState, PipelineView, StartPipeline};
pub use queue::QueueCount;
pub use reason::{MAX_REASON, Reason, ReasonBody, ReasonError};
pub use resource::{
    ResourceAudit, ResourceAuditEntry, ResourceChange, ResourceOnDaemon, ResourceScope, ResourceSource, ResourceView,
    ResourcesView, SlotHolder,
};
pub use run::{
    CancelKind, CancelView, EndReason, FollowKind, MAX_CHECKPOINT_BYTES, ProgressEntry, ProgressPage, Run, RunDetail,
    RunPage, RunState,
};
pub use schedule::{
    FireOutcome, MissedPolicy, OverlapPolicy, PreviewInput, RetryOn, RetryPolicy, Schedule, ScheduleAction,
    ScheduleAuditEntry, ScheduleFire, ScheduleInput, SchedulePreview, ScheduleView, TargetKind,
};
pub use tag::TriggerBody;
pub use usage::{ReportedUsage, RunUsage};
pub use waiting::{WaitCode, Waiting};
pub use worker::{
    Capabilities, Chore, ChoreKind, ChoreRequested, Declared, Description, EngineSource, OptionSpec, OptionType,
    Readiness, WorkerDescription, YIELDED_EXIT_STATUS,
    view::{WorkerView, WorkersView},
};

/// A state name of a closed set that the database stores as text and JSON carries as a string.
pub trait Named: Sized + Copy + 'static {
    /// Every value, in a meaningful order.
    const ALL: &'static [Self];
    /// The name stored and sent.
    fn name(self) -> &'static str;
    /// What one value is called in sentences ("a run state").
    const NOUN: &'static str;
    /// What all of them are called ("the states").
    const PLURAL: &'static str;

    /// The value called `name`.
    fn parse_name(name: &str) -> Result<Self, String> {
        Self::ALL.iter().copied().find(|v| v.name() == name).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|v| v.name()).collect();
            format!("{name:?} is not {}; {} are {}", Self::NOUN, Self::PLURAL, names.join(", "))
        })
    }
}

/// Implements `Display` and `FromStr` for a [`Named`] set and, with the `sqlx` feature, its decoding from and
/// encoding to a text column of any database whose text is a `String`.
macro_rules! named {
    ($ty:ty) => {
        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str($crate::Named::name(*self))
            }
        }

        impl std::str::FromStr for $ty {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                <$ty as $crate::Named>::parse_name(s)
            }
        }

        #[cfg(feature = "sqlx")]
        impl<DB: sqlx::Database> sqlx::Type<DB> for $ty
        where
            String: sqlx::Type<DB>,
        {
            fn type_info() -> DB::TypeInfo {
                <String as sqlx::Type<DB>>::type_info()
            }

            fn compatible(ty: &DB::TypeInfo) -> bool {
                <String as sqlx::Type<DB>>::compatible(ty)
            }
        }

        #[cfg(feature = "sqlx")]
        impl<'r, DB: sqlx::Database> sqlx::Decode<'r, DB> for $ty
        where
            String: sqlx::Decode<'r, DB>,
        {
            fn decode(value: DB::ValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
                Ok(<String as sqlx::Decode<'r, DB>>::decode(value)?.parse::<$ty>()?)
            }
        }

        #[cfg(feature = "sqlx")]
        impl<'q, DB: sqlx::Database> sqlx::Encode<'q, DB> for $ty
        where
            String: sqlx::Encode<'q, DB>,
        {
            fn encode_by_ref(
                &self,
                buf: &mut <DB as sqlx::Database>::ArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <String as sqlx::Encode<'q, DB>>::encode($crate::Named::name(*self).to_owned(), buf)
            }
        }
    };
}
pub(crate) use named;
