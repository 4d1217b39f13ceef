//! `scrinalia tokens …`: service tokens that an admin creates, lists and revokes through the API, without a
//! restart (`scrinalia token hash` is for the configuration's bootstrap tokens). The API validates the name, the
//! role and the expiry (its 400 is exit 7) and refuses a taken name (409, exit 6).

use anyhow::Context;
use clap::Subcommand;
use scrinalia_wire::{CreateTokenBody, CreatedToken, ServiceToken, ServiceTokens};
use uuid::Uuid;

use crate::{
    client::Client,
    output::{Out, note},
    table::{Cell, Style, Table},
    view::when,
};

/// `scrinalia tokens …`.
#[derive(Debug, Subcommand)]
pub enum TokensCommand {
    /// Create a service token; its secret is printed this once (only its hash is stored).
    Create {
        /// Who will hold it (letters, digits, `-`, `_`, `.`, `@`): the actor of its writes in the audit trail.
        name: String,
        /// `viewer`, `operator` or `admin`.
        #[arg(long, value_name = "ROLE")]
        role: String,
        /// When it stops being accepted: a date (2027-01-31, midnight UTC) or an RFC 3339 time.
        #[arg(long, value_name = "DATE")]
        expires: Option<String>,
    },
    /// List the service tokens (never their secrets): role, who created them, expiry, last use, revocation.
    List,
    /// Revoke a service token: every API process refuses it within a second.
    Revoke {
        /// The token's id (see `scrinalia tokens list`).
        id: Uuid,
    },
}

/// Runs `scrinalia tokens <command>`.
pub async fn run(client: &Client, out: Out, command: TokensCommand) -> anyhow::Result<()> {
    match command {
        TokensCommand::Create { name, role, expires } => create(client, out, &name, &role, expires).await,
        TokensCommand::List => list(client, out).await,
        TokensCommand::Revoke { id } => revoke(client, out, id).await,
    }
}

async fn create(client: &Client, out: Out, name: &str, role: &str, expires: Option<String>) -> anyhow::Result<()> {
    let body = CreateTokenBody { name: name.to_owned(), role: Some(role.to_owned()), expires_at: expires };
    let reply = client.post(&["tokens"], Some(&body)).await.with_context(|| format!("creating the token {name}"))?;
    if out.json {
        return out.body(&reply);
    }
    let created: CreatedToken = reply.parse()?;
    let t = &created.token;
    let expiry = t.expires_at.map_or_else(|| "never".to_owned(), when);
    out.text(&format!("token:   {}\nid:      {}\nrole:    {}\nexpires: {expiry}", created.secret, t.id, t.role))?;
    note("Give the token to its holder (as SCRINALIA_TOKEN) now: it cannot be shown again.");
    Ok(())
}

async fn list(client: &Client, out: Out) -> anyhow::Result<()> {
    let body = client.get(&["tokens"], &[]).await.context("listing the service tokens")?;
    if out.json {
        return out.body(&body);
    }
    let view: ServiceTokens = body.parse()?;
    if view.tokens.is_empty() {
        note("There are no service tokens; create one with: scrinalia tokens create NAME --role ROLE");
        return Ok(());
    }
    out.text(&tokens_table(&view.tokens).render(out.colour))
}

/// The table of `scrinalia tokens list`.
pub fn tokens_table(tokens: &[ServiceToken]) -> Table {
    let mut table = Table::new(&["ID", "NAME", "ROLE", "CREATED", "BY", "EXPIRES", "LAST USED", "REVOKED"]);
    for t in tokens {
        let revoked = match (t.revoked_at, &t.revoked_by) {
            (Some(at), by) => Cell::styled(format!("{} by {}", when(at), by.as_deref().unwrap_or("?")), Style::Warn),
            (None, _) => Cell::from("-".to_owned()),
        };
        table.row(vec![
            t.id.to_string().into(),
            t.name.as_str().into(),
            t.role.to_string().into(),
            when(t.created_at).into(),
            t.created_by.as_str().into(),
            t.expires_at.map_or_else(|| "never".to_owned(), when).into(),
            t.last_used_at.map_or_else(|| "never".to_owned(), when).into(),
            revoked,
        ]);
    }
    table
}

async fn revoke(client: &Client, out: Out, id: Uuid) -> anyhow::Result<()> {
    let id_text = id.to_string();
    let reply =
        client.delete::<()>(&["tokens", &id_text], None).await.with_context(|| format!("revoking the token {id}"))?;
    if out.json {
        return out.body(&reply);
    }
    let t: ServiceToken = reply.parse()?;
    let at = t.revoked_at.map_or_else(|| "now".to_owned(), when);
    out.text(&format!(
        "Revoked the token {:?} ({}) at {at}; every API process refuses it within a second.",
        t.name, t.id
    ))
}
