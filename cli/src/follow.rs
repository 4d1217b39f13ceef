//! Following: a run's output until the run ends (surviving an API restart: the stream is reopened and what was
//! already printed is skipped), and the ledger as runs appear or change (polled every second).

use std::{
    collections::HashMap,
    io::Write,
    time::{Duration, Instant},
};

use anyhow::Context;
use scrinalia_wire::{Run, RunPage, RunState};
use serde::Deserialize;
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::{
    client::{Body, Client},
    exit::{Exit, Verdict, classify},
    output::{Out, note},
    table, view,
};

/// How long the API may stay unreachable while following before the CLI gives up (an upgrade restarts it in
/// seconds).
const PATIENCE: Duration = Duration::from_secs(60);

/// How often the ledger is polled by `runs --follow`, and how soon a broken log stream is reopened.
const TICK: Duration = Duration::from_secs(1);

/// Prints run `id`'s output (from its last `tail` lines, if given) until the run ends, then exits with its
/// outcome: 0 if it succeeded, 8 otherwise. With `--json` the output goes to stderr and the final run to stdout.
/// Ctrl-C stops following (exit 130).
pub async fn run_to_end(client: &Client, out: Out, id: Uuid, tail: Option<u64>) -> anyhow::Result<()> {
    let (run, body) = tokio::select! {
        ended = stream_until_end(client, out, id, tail) => ended?,
        _ = tokio::signal::ctrl_c() => {
            let message = format!("stopped following; run {id} goes on (scrinalia cancel {id} stops it).");
            return Err(Verdict { exit: Exit::Interrupted, message }.into());
        }
    };
    if out.json {
        out.body(&body)?;
    }
    let took = view::took(&run);
    let took = if took.is_empty() { String::new() } else { format!(" after {took}") };
    if run.state == RunState::Succeeded {
        let result = run.result.as_ref().map(|r| format!(" ({})", view::summarise(r))).unwrap_or_default();
        note(&format!("Run {id} of worker {} succeeded{took}{result}.", run.worker));
        return Ok(());
    }
    // The first line only: the log just printed holds the rest.
    let why = run.error.as_deref().and_then(|e| e.lines().next()).map(|e| format!(": {e}")).unwrap_or_default();
    let message = format!("run {id} of worker {} ended {}{took}{why}", run.worker, run.state);
    Err(Verdict { exit: Exit::RunNotSucceeded, message }.into())
}

/// Streams the log until the run is over; returns the final run and its JSON.
async fn stream_until_end(client: &Client, out: Out, id: Uuid, tail: Option<u64>) -> anyhow::Result<(Run, Body)> {
    let id_text = id.to_string();
    let mut printed = 0usize;
    // Bytes of the log before what the first stream sent (what `tail` left out).
    let mut omitted: Option<usize> = None;
    let mut last_byte = b'\n';
    let mut unreachable_since: Option<Instant> = None;
    loop {
        let mut query = vec![("follow", "true".to_owned())];
        if let (Some(n), None) = (tail, omitted) {
            query.push(("tail", n.to_string()));
        }
        match client.stream(&["runs", &id_text, "log"], &query).await {
            Ok(mut response) => {
                if unreachable_since.take().is_some() {
                    note("scrinalia: the API answers again; following on.");
                }
                // A reopened stream starts from the beginning of the log: skip what the first one left out and
                // what was already printed. (A log that its cap cut meanwhile has moved under it: lines may
                // repeat or go missing.)
                let mut skip = match omitted {
                    Some(before) => before + printed,
                    None => 0,
                };
                if omitted.is_none() {
                    let header = response.headers().get("x-log-omitted-bytes");
                    omitted = Some(header.and_then(|v| v.to_str().ok()?.parse().ok()).unwrap_or(0));
                }
                while let Ok(Some(chunk)) = response.chunk().await {
                    let n = skip.min(chunk.len());
                    skip -= n;
                    let new = &chunk[n..];
                    if let Some(&b) = new.last() {
                        write_log(out, new)?;
                        printed += new.len();
                        last_byte = b;
                    }
                }
            }
            Err(e) if classify(&e) == Exit::Unreachable => wait_for_api(&mut unreachable_since, e)?,
            Err(e) => return Err(e.context(format!("following the log of run {id}"))),
        }
        match client.get(&["runs", &id_text], &[]).await {
            Ok(body) => {
                let run: Run = body.parse()?;
                if run.state.is_terminal() {
                    if last_byte != b'\n' {
                        note("");
                    }
                    return Ok((run, body));
                }
            }
            Err(e) if classify(&e) == Exit::Unreachable => wait_for_api(&mut unreachable_since, e)?,
            Err(e) => return Err(e.context(format!("reading run {id}"))),
        }
        tokio::time::sleep(TICK).await;
    }
}

/// Notes the start of an outage, and gives up with `e` once it has lasted longer than [`PATIENCE`].
fn wait_for_api(since: &mut Option<Instant>, e: anyhow::Error) -> anyhow::Result<()> {
    match since {
        None => {
            let e = format!("{e:#}");
            note(&format!(
                "scrinalia: {}; retrying for up to {} seconds.",
                e.trim_end_matches('.'),
                PATIENCE.as_secs()
            ));
            *since = Some(Instant::now());
            Ok(())
        }
        Some(t) if t.elapsed() > PATIENCE => Err(e),
        Some(_) => Ok(()),
    }
}

fn write_log(out: Out, bytes: &[u8]) -> anyhow::Result<()> {
    if out.json {
        let mut stderr = std::io::stderr().lock();
        return stderr.write_all(bytes).and_then(|()| stderr.flush()).context("writing to stderr");
    }
    out.bytes(bytes)
}

/// A page of runs with each run kept as the API's own text.
#[derive(Deserialize)]
struct RawPage<'a> {
    #[serde(borrow)]
    runs: Vec<&'a RawValue>,
}

/// Narrowest column widths while following, so that later rows usually fit the first ones.
const MIN_WIDTHS: [usize; 7] = [36, 14, 11, 19, 7, 10, 0];

/// What makes a run worth printing again: a new state, a cancellation request, a daemon.
fn fingerprint(run: &Run) -> (RunState, bool, Option<Uuid>) {
    (run.state, run.cancel_requested_at.is_some(), run.daemon_id)
}

/// Prints the matching runs, then every run that appears or changes, oldest first, until Ctrl-C.
pub async fn runs(client: &Client, out: Out, query: &[(&'static str, String)]) -> anyhow::Result<()> {
    let body = client.get(&["runs"], query).await.context("listing the runs")?;
    let page: RunPage = body.parse()?;
    let table = view::runs_table(&page.runs);
    let widths: Vec<usize> = table.widths().iter().zip(MIN_WIDTHS).map(|(w, m)| (*w).max(m)).collect();
    if !out.json {
        out.text(&table.header_line(&widths))?;
    }
    let mut seen = HashMap::new();
    print_changes(out, &body, &page, &widths, &mut seen)?;
    let mut unreachable_since: Option<Instant> = None;
    loop {
        tokio::select! {
            () = tokio::time::sleep(TICK) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
        match client.get(&["runs"], query).await {
            Ok(body) => {
                if unreachable_since.take().is_some() {
                    note("scrinalia: the API answers again.");
                }
                let page: RunPage = body.parse()?;
                print_changes(out, &body, &page, &widths, &mut seen)?;
            }
            Err(e) if classify(&e) == Exit::Unreachable => {
                if unreachable_since.is_none() {
                    let e = format!("{e:#}");
                    note(&format!("scrinalia: {}; still trying every second (Ctrl-C stops).", e.trim_end_matches('.')));
                    unreachable_since = Some(Instant::now());
                }
            }
            Err(e) => return Err(e.context("listing the runs")),
        }
    }
}

fn print_changes(
    out: Out,
    body: &Body,
    page: &RunPage,
    widths: &[usize],
    seen: &mut HashMap<Uuid, (RunState, bool, Option<Uuid>)>,
) -> anyhow::Result<()> {
    let raw: RawPage<'_> = serde_json::from_str(&body.text).context("the API's page of runs is not JSON")?;
    for (i, run) in page.runs.iter().enumerate().rev() {
        let print = fingerprint(run);
        if seen.insert(run.id, print) == Some(print) {
            continue;
        }
        if out.json {
            out.text(raw.runs.get(i).map_or("null", |r| r.get()))?;
        } else {
            out.text(&table::line(&view::run_cells(run), widths, out.colour))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_is_tolerated_for_a_while_only() {
        let mut since = None;
        assert!(wait_for_api(&mut since, anyhow::anyhow!("down")).is_ok());
        assert!(since.is_some());
        since = Instant::now().checked_sub(PATIENCE + Duration::from_secs(1));
        assert!(wait_for_api(&mut since, anyhow::anyhow!("down")).is_err());
    }

    #[test]
    fn the_minimum_widths_fit_the_headers() {
        assert_eq!(MIN_WIDTHS.len(), view::RUN_HEADERS.len());
        assert!(view::RUN_HEADERS.iter().zip(MIN_WIDTHS).all(|(h, m)| m == 0 || h.len() <= m));
    }
}
