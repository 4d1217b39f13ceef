//! Webhook delivery on every daemon with `[[webhooks]]`: it fans out the run outcomes its siblings (or itself)
//! recorded into deliveries, claims the due ones, POSTs each signed as Standard Webhooks ask, and records every
//! attempt with what answered (see `scrinalia_shared::webhooks` for why this is at least once and how several
//! daemons share the work). An idle daemon reads one row a second and writes nothing.

use std::{sync::Arc, time::Duration};

use futures::future::join_all;
use reqwest::header::{CONTENT_TYPE, HeaderValue};
use scrinalia_shared::{
    DbError,
    config::Webhook,
    webhooks::{AttemptOutcome, Claimed, Next, signature},
};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::Context;

/// How often an idle notifier looks for events and due deliveries.
const IDLE_POLL: Duration = Duration::from_secs(1);
/// Deliveries claimed (and attempted at once) per pass.
const BATCH: u32 = 8;
/// A claim's lease beyond the longest attempt: a delivery is taken over only once its attempt surely ended.
const LEASE_MARGIN: Duration = Duration::from_secs(30);
/// How much of an answer's body is kept.
const EXCERPT_BYTES: usize = 1024;
/// Test events are kept this long (events of runs go with their runs, by retention).
const TEST_EVENTS_KEPT: Duration = Duration::from_secs(30 * 86_400);
/// How often old test events are forgotten.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Delivers until `stop`; an attempt in flight then is abandoned, and its delivery is taken over by a daemon
/// once its lease ends.
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    let hooks = &ctx.settings.webhooks;
    if hooks.is_empty() {
        tracing::debug!("no webhooks configured: this daemon delivers none");
        return;
    }
    let names: Vec<&str> = hooks.iter().map(|h| h.name.as_str()).collect();
    tracing::info!(webhooks = ?names, "delivering webhooks");
    let client = match reqwest::Client::builder()
        .user_agent(format!("scrinalia/{}", scrinalia_shared::VERSION))
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(client) => client,
        Err(e) => {
            tracing::error!(error = %e, "cannot build the webhooks' HTTP client: no webhook is delivered by this daemon");
            return;
        }
    };
    let mut pruned_at: Option<Instant> = None;
    loop {
        if pruned_at.is_none_or(|at| at.elapsed() >= PRUNE_EVERY) {
            pruned_at = Some(Instant::now());
            match ctx.db.prune_webhook_tests(TEST_EVENTS_KEPT).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(events = n, "forgot old webhook test events"),
                Err(e) => tracing::warn!(error = %e, "could not forget old webhook test events"),
            }
        }
        let wait = tokio::select! {
            () = stop.cancelled() => return,
            passed = pass(&ctx, &client, hooks) => passed.unwrap_or_else(|e| {
                tracing::warn!(error = %e, "a webhook pass failed; the next one tries again");
                IDLE_POLL
            }),
        };
        if wait.is_zero() {
            continue;
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// One look: fan out what waits, claim and attempt what is due. How long until the next look.
async fn pass(ctx: &Context, client: &reqwest::Client, hooks: &[Webhook]) -> Result<Duration, DbError> {
    let due = ctx.db.webhooks_due(hooks).await?;
    if due.events {
        let fanned = ctx.db.fan_out_webhook_events(hooks).await?;
        tracing::debug!(events = fanned, "fanned out webhook events");
    } else if due.next_delivery != Some(Duration::ZERO) {
        return Ok(due.next_delivery.unwrap_or(IDLE_POLL).min(IDLE_POLL));
    }
    let longest = hooks.iter().map(|h| h.timeout).max().unwrap_or_default();
    let claimed = ctx.db.claim_webhook_deliveries(ctx.daemon_id, hooks, longest + LEASE_MARGIN, BATCH).await?;
    if claimed.is_empty() {
        // Just fanned out events no webhook here wants, or another daemon took what was due.
        return Ok(if due.events { Duration::ZERO } else { IDLE_POLL });
    }
    let attempts = claimed.iter().filter_map(|c| {
        let hook = hooks.iter().find(|h| h.name == c.webhook)?;
        Some(attempt(ctx, client, hook, c))
    });
    join_all(attempts).await;
    Ok(Duration::ZERO)
}

/// POSTs `claimed` to `hook` and records the attempt.
async fn attempt(ctx: &Context, client: &reqwest::Client, hook: &Webhook, claimed: &Claimed) {
    let outcome = send(client, hook, claimed).await;
    let next = Next::after(hook, claimed.attempt, &outcome);
    let (event_id, webhook, attempt) = (claimed.event_id, hook.name.as_str(), claimed.attempt);
    let status = outcome.status.unwrap_or_default();
    let error = outcome.error.as_deref().unwrap_or_default();
    let label = match next {
        Next::Delivered => {
            tracing::info!(%event_id, webhook, attempt, status, "webhook delivered");
            "delivered"
        }
        Next::Retry(after) => {
            tracing::warn!(%event_id, webhook, attempt, status, error, retry_in_s = after.as_secs_f64(),
                "webhook attempt failed; it is tried again");
            "retry"
        }
        Next::GiveUp => {
            tracing::warn!(%event_id, webhook, attempt, status, error, "webhook attempt failed, the last one: given up");
            "gave_up"
        }
    };
    ctx.metrics.webhook_attempt(webhook, label);
    match ctx.db.record_webhook_attempt(claimed, ctx.daemon_id, &outcome, next).await {
        Ok(true) => {}
        Ok(false) => tracing::warn!(%event_id, webhook, attempt, "the delivery was claimed again meanwhile"),
        // Not recorded: the claim's lease ends and the delivery is attempted again (at least once).
        Err(e) => tracing::warn!(%event_id, webhook, attempt, error = %e, "could not record a webhook attempt"),
    }
}

/// One signed POST; what answered, or why nothing did.
async fn send(client: &reqwest::Client, hook: &Webhook, claimed: &Claimed) -> AttemptOutcome {
    let id = claimed.event_id.to_string();
    let timestamp = claimed.at.timestamp();
    let signed = signature(hook.key(), &id, timestamp, claimed.payload.as_bytes());
    let started = Instant::now();
    let request = client
        .post(hook.url.clone())
        .timeout(hook.timeout)
        .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
        .header("webhook-id", &id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signed)
        .body(claimed.payload.clone());
    let mut outcome = AttemptOutcome::default();
    match request.send().await {
        Ok(mut response) => {
            let status = response.status();
            outcome.status = Some(status.as_u16());
            let mut body = Vec::new();
            // The timeout covers the body too; a body cut by it still leaves its start.
            while body.len() < EXCERPT_BYTES {
                match response.chunk().await {
                    Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                    Ok(None) | Err(_) => break,
                }
            }
            body.truncate(EXCERPT_BYTES);
            outcome.response = (!body.is_empty()).then(|| String::from_utf8_lossy(&body).into_owned());
            if !status.is_success() {
                outcome.error = Some(format!("the receiver answered {status}, not a 2xx"));
            }
        }
        Err(e) => outcome.error = Some(describe(&e.without_url())),
    }
    outcome.duration = started.elapsed();
    outcome
}

/// The error and its causes in one line, without the URL (its path may hold a token).
fn describe(e: &reqwest::Error) -> String {
    let mut text = if e.is_timeout() { "timed out".to_owned() } else { e.to_string() };
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
