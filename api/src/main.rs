//! `scrinalia-api [--config PATH] [serve]` serves the API; `scrinalia-api token --role R --name N` prints a new
//! token and the line that configures its hash.

use std::{io::Write, path::PathBuf};

use anyhow::Context;
use clap::{Parser, Subcommand};
use scrinalia_shared::{
    Settings,
    auth::{Role, hash_token, new_token},
};

/// The Scrinalia Scheduler HTTP API.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// The configuration file (TOML); `SCRINALIA_CONFIG` when not given.
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the API (the default).
    Serve,
    /// Print a new random token and the configuration entry holding its hash.
    Token {
        /// viewer, operator or admin.
        #[arg(long, default_value = "viewer", value_parser = parse_role)]
        role: Role,
        /// Who holds the token; recorded as the actor of their writes.
        #[arg(long, default_value = "panel")]
        name: String,
    },
}

fn parse_role(s: &str) -> Result<Role, String> {
    match s {
        "viewer" => Ok(Role::Viewer),
        "operator" => Ok(Role::Operator),
        "admin" => Ok(Role::Admin),
        other => Err(format!("{other:?} is not a role; the roles are viewer, operator and admin")),
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command.unwrap_or(Command::Serve) {
        Command::Token { role, name } => print_token(role, &name),
        Command::Serve => {
            let settings = Settings::load(cli.config.as_deref())?;
            let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
            let telemetry = scrinalia_shared::telemetry::init(&settings.telemetry, "scrinalia-api", runtime.handle());
            let result = runtime.block_on(scrinalia_api::serve(settings, &telemetry, scrinalia_api::shutdown_signal()));
            // The last spans and metrics leave while the runtime still runs.
            telemetry.shutdown();
            result
        }
    }
}

fn print_token(role: Role, name: &str) -> anyhow::Result<()> {
    let token = new_token();
    let mut out = std::io::stdout().lock();
    writeln!(out, "# Give this token to {name}; it is shown only once:")?;
    writeln!(out, "#   {token}")?;
    writeln!(out, "# and add this to the API's configuration:")?;
    writeln!(out, "[[auth.tokens]]")?;
    writeln!(out, "name = {name:?}")?;
    writeln!(out, "role = \"{role}\"")?;
    writeln!(out, "hash = \"{}\"", hash_token(&token))?;
    Ok(())
}
