//! `scrinalia token hash`: the `sha256:` hash of a token for `[[auth.tokens]]`, computed by the same function the
//! API checks tokens with, so a hash printed here always matches.

use std::io::{self, BufRead, IsTerminal, Read};

use anyhow::Context;
use scrinalia_wire::auth::{hash_token, new_token};
use serde_json::json;

use crate::{
    exit::{Exit, Verdict},
    output::{Out, note},
};

/// Hashes a token read from stdin, or a new one with `new`.
pub fn hash(out: Out, new: bool) -> anyhow::Result<()> {
    if new {
        let token = new_token();
        let hash = hash_token(&token);
        if out.json {
            return out.json_line(&json!({ "token": token, "hash": hash }));
        }
        out.text(&format!("token: {token}\nhash:  {hash}"))?;
        note(
            "Give the token to its holder (as SCRINALIA_TOKEN); put only the hash in [[auth.tokens]] of the configuration.",
        );
        return Ok(());
    }
    let token = read_token()?;
    let hash = hash_token(&token);
    if out.json { out.json_line(&json!({ "hash": hash })) } else { out.text(&hash) }
}

/// The token on stdin, without surrounding blanks (the API trims them too). On a terminal one line is read.
fn read_token() -> anyhow::Result<String> {
    let stdin = io::stdin();
    let mut text = String::new();
    if stdin.is_terminal() {
        note("Paste the token and press Enter (or pipe it in: printf %s \"$TOKEN\" | scrinalia token hash):");
        stdin.lock().read_line(&mut text).context("reading the token from stdin")?;
    } else {
        stdin.lock().read_to_string(&mut text).context("reading the token from stdin")?;
    }
    let token = text.trim();
    if token.is_empty() {
        let message =
            "no token on stdin: pipe one in (printf %s \"$TOKEN\" | scrinalia token hash) or use --new".to_owned();
        return Err(Verdict { exit: Exit::Usage, message }.into());
    }
    if token.chars().any(char::is_whitespace) {
        let message = "the token on stdin contains blanks; give one token on one line".to_owned();
        return Err(Verdict { exit: Exit::Usage, message }.into());
    }
    Ok(token.to_owned())
}
