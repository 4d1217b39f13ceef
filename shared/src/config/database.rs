//! `[database]`: where the ledger is, how many connections, and whether a pooler sits in front. The settings
//! are the database layer's own (`scrinalia-db`), named here with the rest of the configuration.

pub use scrinalia_db::{DatabaseSettings, Pooler, redact_url};
