//! Rebuilds this crate when a migration is added: `sqlx::migrate!` embeds the migration directories at compile
//! time, and on stable Rust it cannot tell Cargo to watch them, so a new file would otherwise be left out of the
//! binaries until something else in the crate changed.

fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
