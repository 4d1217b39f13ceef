//! The change feed: one typed stream of what other processes changed in the database, for the API's live events
//! and the daemon's wake-ups alike. PostgreSQL notifies (`LISTEN`, reconnected when it drops); SQLite cannot,
//! so it is watched (see the database layer's `feed` for how). Either way a subscriber sees [`crate::Change`]s,
//! and a [`crate::Change::Resync`] whenever changes may have been missed, the first connection included: read
//! everything then.

pub use scrinalia_db::feed::{ChangeFeed, Listening, Topic};
