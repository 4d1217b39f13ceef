//! Webhooks: the run outcomes people asked to hear about (`[[webhooks]]`: failed, interrupted, recovered after
//! a failure, per worker), announced by the daemons as Standard Webhooks, at least once, every attempt recorded.
//!
//! Why an outbox written in the run's end transaction, not a scan of the ledger: every end of a run (its daemon
//! finishing it, recovery interrupting it) goes through one transaction with what follows it (see
//! `runs::end`), and the event row is written there ([`record_event`]), so an outcome is recorded exactly when the run's end is, whichever
//! process ended it and whatever happens next. A watermark scan over `worker_runs` would need one scanner at a
//! time (a lease) and a margin for ends that commit out of order, and a run pruned before the scan would be
//! missed. The end transaction cannot know the webhooks configured, so the row records the outcome only; any
//! daemon with webhooks then fans it out into one delivery per webhook that wants it (PostgreSQL: `skip
//! locked`, so daemons fan out different events; SQLite: one writer), once, in one transaction. An event not
//! fanned out within [`FAN_OUT_HORIZON`] (no daemon had webhooks then) is dropped, so that adding a webhook
//! does not replay months of history at it.
//!
//! Deliveries: a daemon claims due ones in one statement that counts the attempt and pushes the delivery's
//! next time a lease ahead (so a daemon that dies mid-attempt leaves it to another after the lease: at least
//! once), POSTs it, and records the attempt (status, the start of the answer, the error, the duration, at
//! database time) with the delivery's next state in one transaction: delivered on a 2xx, else pending again
//! after the webhook's backoff, or failed after its last attempt. Every attempt carries the event's id, the
//! same body, a fresh timestamp (the database clock at the claim) and its signature.
//!
//! Signatures, as Standard Webhooks define them: `webhook-signature: v1,<base64 of HMAC-SHA256(key,
//! "{webhook-id}.{webhook-timestamp}.{body}")>`, the key being the base64 part of the `whsec_` secret.

use std::time::Duration;

use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::{
    DbError, Run, RunState, Store,
    config::{Webhook, WebhookEvent},
    db::{self, DbTime, Tx},
};

/// Events older than this when first looked at are not delivered (see the module's documentation).
pub const FAN_OUT_HORIZON: Duration = Duration::from_secs(6 * 3600);
/// How many events one fan-out transaction takes.
const FAN_OUT_BATCH: i64 = 100;

/// HMAC-SHA256 (RFC 2104) of `message` under `key`.
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let inner = Sha256::new().chain_update(pad(0x36)).chain_update(message).finalize();
    Sha256::new().chain_update(pad(0x5c)).chain_update(inner).finalize().into()
}

/// The `webhook-signature` header of a message: `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`.
pub fn signature(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut signed = format!("{id}.{timestamp}.").into_bytes();
    signed.extend_from_slice(body);
    format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(hmac_sha256(key, &signed)))
}

/// The `type` of an event's body.
pub fn event_type(kind: &str) -> String {
    match kind {
        "test" => "webhook.test".to_owned(),
        "paused" => "worker.paused".to_owned(),
        _ => format!("run.{kind}"),
    }
}

/// The body of a worker's pause: `{"type": "worker.paused", "timestamp", "data": {…the pause…}}`, naming the
/// run whose end paused it when it paused itself.
pub(crate) fn pause_payload(id: Uuid, worker: &str, pause: &scrinalia_wire::WorkerPause, run: Option<Uuid>) -> String {
    let data = json!({
        "event_id": id,
        "worker": worker,
        "paused_at": pause.at,
        "paused_by": pause.by,
        "reason": pause.reason,
        "automatic": pause.automatic,
        "run_id": run,
    });
    json!({"type": event_type("paused"), "timestamp": pause.at, "data": data}).to_string()
}

/// The body of a run's event: `{"type": "run.<kind>", "timestamp", "data": {…the run…}}`; a recovery names the
/// run it recovered from.
pub(crate) fn run_payload(id: Uuid, event: WebhookEvent, run: &Run, previous: Option<(Uuid, &str)>) -> String {
    let mut data = json!({
        "event_id": id,
        "run_id": run.id,
        "worker": run.worker,
        "state": run.state,
        "end_reason": run.end_reason,
        "error": run.error,
        "exit_code": run.exit_code,
        "attempt": run.attempt,
        "requested_by": run.requested_by,
        "requested_at": run.requested_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "duration_ms": run.duration_ms,
        "daemon_id": run.daemon_id,
    });
    if let (Some((previous, state)), Some(map)) = (previous, data.as_object_mut()) {
        map.insert("previous_run_id".into(), json!(previous));
        map.insert("previous_state".into(), json!(state));
    }
    let timestamp = run.finished_at.unwrap_or_else(Utc::now);
    json!({"type": event_type(event.as_str()), "timestamp": timestamp, "data": data}).to_string()
}

/// Where a delivery is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryState {
    /// Waiting for its next attempt (or being attempted).
    Pending,
    /// A 2xx answered.
    Delivered,
    /// Every attempt failed.
    Failed,
}

/// One attempt at a delivery and what answered.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DeliveryAttempt {
    /// 1 for the first.
    pub attempt: i32,
    /// The daemon that made it.
    pub daemon_id: Option<Uuid>,
    /// When it started (database clock): the `webhook-timestamp` it carried.
    pub started_at: DateTime<Utc>,
    /// How long until the answer or the error.
    pub duration_ms: i64,
    /// The HTTP status, if one answered.
    pub status_code: Option<i32>,
    /// The start of the answer's body (up to 1 KiB).
    pub response: Option<String>,
    /// Why no answer came, or why it was not a 2xx.
    pub error: Option<String>,
}

/// An event's delivery to one webhook, with its attempts.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Delivery {
    /// The delivery's id.
    pub id: i64,
    /// The `webhook-id` of every attempt.
    pub event_id: Uuid,
    /// `run.failed`, `run.interrupted`, `run.recovered` or `webhook.test`.
    pub event: String,
    /// The webhook.
    pub webhook: String,
    /// The run it is about (none for a test).
    pub run_id: Option<Uuid>,
    /// Its worker.
    pub worker: Option<String>,
    /// Where it is.
    pub state: DeliveryState,
    /// Attempts claimed so far.
    pub attempts_made: i32,
    /// When it was fanned out (database clock).
    pub created_at: DateTime<Utc>,
    /// When it is tried next, if pending.
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// When it was delivered or given up.
    pub finished_at: Option<DateTime<Utc>>,
    /// The body every attempt sends.
    #[schema(value_type = Object)]
    pub payload: Value,
    /// Oldest first.
    pub attempts: Vec<DeliveryAttempt>,
}

/// A delivery a daemon claimed: it POSTs `payload` and records the attempt.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// The delivery.
    pub id: i64,
    /// The `webhook-id`.
    pub event_id: Uuid,
    /// The webhook's name.
    pub webhook: String,
    /// Which attempt this is, from 1.
    pub attempt: u32,
    /// When it was claimed (database clock): the `webhook-timestamp`.
    pub at: DateTime<Utc>,
    /// The body.
    pub payload: String,
}

/// What an attempt got.
#[derive(Debug, Clone, Default)]
pub struct AttemptOutcome {
    /// The HTTP status, if one answered.
    pub status: Option<u16>,
    /// The start of the answer's body.
    pub response: Option<String>,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// How long it took.
    pub duration: Duration,
}

impl AttemptOutcome {
    /// Whether the receiver took the event (a 2xx).
    pub fn delivered(&self) -> bool {
        self.status.is_some_and(|s| (200..300).contains(&s))
    }
}

/// What happens to a delivery after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// It was delivered.
    Delivered,
    /// It is tried again after this long.
    Retry(Duration),
    /// That was its last attempt.
    GiveUp,
}

impl Next {
    /// What follows attempt `attempt` of a delivery to `hook` that got `outcome`.
    pub fn after(hook: &Webhook, attempt: u32, outcome: &AttemptOutcome) -> Self {
        if outcome.delivered() {
            Self::Delivered
        } else if attempt >= hook.max_attempts {
            Self::GiveUp
        } else {
            Self::Retry(hook.retry_after(attempt))
        }
    }
}

/// What waits for the notifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebhooksDue {
    /// Events wait for their fan-out.
    pub events: bool,
    /// The earliest pending delivery is due in this long (zero: now); none pending.
    pub next_delivery: Option<Duration>,
}

fn names(hooks: &[Webhook]) -> Vec<String> {
    hooks.iter().map(|h| h.name.clone()).collect()
}

/// In the transaction `tx` that ended the run `ended`, records the webhook event its outcome is, if it is one:
/// failed, interrupted, or succeeded after a failed or interrupted run of the same worker (recovered). Written
/// whatever the webhooks configured, since the transaction does not know them; the fan-out decides who hears
/// of it.
pub(crate) async fn record_event(tx: &mut Tx, ended: &Run) -> db::Result<()> {
    let event = match ended.state {
        RunState::Failed => Some((WebhookEvent::Failed, None)),
        RunState::Interrupted => Some((WebhookEvent::Interrupted, None)),
        RunState::Succeeded => db::webhooks::previous_outcome(&mut *tx, &ended.worker, ended.id)
            .await?
            .filter(|(_, state)| matches!(state, RunState::Failed | RunState::Interrupted))
            .map(|previous| (WebhookEvent::Recovered, Some(previous))),
        _ => None,
    };
    let Some((event, previous)) = event else { return Ok(()) };
    let id = Uuid::now_v7();
    let payload = run_payload(id, event, ended, previous.map(|(run, state)| (run, state.as_str())));
    let new = db::webhooks::NewEvent {
        id,
        kind: event.as_str(),
        run: Some(ended.id),
        worker: Some(&ended.worker),
        payload: &payload,
    };
    db::webhooks::insert_event(tx, &new).await
}

/// In the transaction `tx` that paused `worker`, records the webhook event `paused` (with `run`, the run whose
/// end paused it, when it paused itself).
pub(crate) async fn record_pause(
    tx: &mut Tx,
    worker: &str,
    pause: &scrinalia_wire::WorkerPause,
    run: Option<Uuid>,
) -> db::Result<()> {
    let id = Uuid::now_v7();
    let payload = pause_payload(id, worker, pause, run);
    let new = db::webhooks::NewEvent {
        id,
        kind: WebhookEvent::Paused.as_str(),
        run,
        worker: Some(worker),
        payload: &payload,
    };
    db::webhooks::insert_event(tx, &new).await
}

/// The webhooks among `hooks` that an event waiting for its fan-out goes to: none for a test event (it has
/// its one delivery already) or one older than [`FAN_OUT_HORIZON`].
fn route(hooks: &[Webhook], (_, kind, worker, stale): &db::webhooks::Unfanned) -> Vec<String> {
    let event = match kind.as_str() {
        "failed" => WebhookEvent::Failed,
        "interrupted" => WebhookEvent::Interrupted,
        "recovered" => WebhookEvent::Recovered,
        "paused" => WebhookEvent::Paused,
        _ => return Vec::new(),
    };
    if *stale {
        return Vec::new();
    }
    hooks.iter().filter(|h| h.wants(event, worker.as_deref())).map(|h| h.name.clone()).collect()
}

impl Store {
    /// What waits for a notifier with `hooks`, in one read (an idle notifier writes nothing).
    pub(crate) async fn webhooks_due(&self, hooks: &[Webhook]) -> Result<WebhooksDue, DbError> {
        let (events, since) = db::webhooks::due(&self.db, &names(hooks)).await?;
        let next_delivery = since.map(|s| if s >= 0.0 { Duration::ZERO } else { Duration::from_secs_f64(-s) });
        Ok(WebhooksDue { events, next_delivery })
    }

    /// Fans out the events waiting into deliveries to the `hooks` that want them; how many events. In one
    /// transaction (PostgreSQL skips the events another daemon is fanning out).
    pub(crate) async fn fan_out_webhook_events(&self, hooks: &[Webhook]) -> Result<u64, DbError> {
        let mut tx = self.db.begin_write().await?;
        let events = db::webhooks::unfanned(&mut tx, FAN_OUT_HORIZON.as_secs_f64(), FAN_OUT_BATCH).await?;
        for event in &events {
            for hook in route(hooks, event) {
                db::webhooks::insert_delivery(&mut tx, event.0, &hook).await?;
            }
            db::webhooks::mark_fanned_out(&mut tx, event.0).await?;
        }
        tx.commit().await?;
        Ok(events.len() as u64)
    }

    /// Claims up to `limit` due deliveries to `hooks` for `daemon`, each not due again for `lease`.
    pub(crate) async fn claim_webhook_deliveries(
        &self,
        daemon: Uuid,
        hooks: &[Webhook],
        lease: Duration,
        limit: u32,
    ) -> Result<Vec<Claimed>, DbError> {
        let claimed =
            db::webhooks::claim(&self.db, daemon, &names(hooks), lease.as_secs_f64(), i64::from(limit)).await?;
        Ok(claimed
            .into_iter()
            .map(|((id, event_id, webhook, attempt, at), payload)| Claimed {
                id,
                event_id,
                webhook,
                attempt: u32::try_from(attempt).unwrap_or(0),
                at: at.0,
                payload,
            })
            .collect())
    }

    /// Records an attempt of `claimed` by `daemon` and what follows it; false when the delivery was claimed
    /// again meanwhile (the attempt is recorded, the delivery is the later claim's).
    pub(crate) async fn record_webhook_attempt(
        &self,
        claimed: &Claimed,
        daemon: Uuid,
        outcome: &AttemptOutcome,
        next: Next,
    ) -> Result<bool, DbError> {
        let (state, retry) = match next {
            Next::Delivered => ("delivered", Duration::ZERO),
            Next::Retry(after) => ("pending", after),
            Next::GiveUp => ("failed", Duration::ZERO),
        };
        let attempt = db::webhooks::Attempt {
            status: outcome.status.map(i32::from),
            response: outcome.response.as_deref(),
            error: outcome.error.as_deref(),
            duration_ms: i64::try_from(outcome.duration.as_millis()).unwrap_or(i64::MAX),
        };
        let attempt_no = i32::try_from(claimed.attempt).unwrap_or(i32::MAX);
        let key = (claimed.id, attempt_no, DbTime(claimed.at), daemon);
        // The attempt and the delivery's next state, in one transaction: the delivery moves only if no later
        // attempt was claimed meanwhile.
        let mut tx = self.db.begin_write().await?;
        db::webhooks::insert_attempt(&mut tx, key, &attempt).await?;
        let moved = db::webhooks::move_delivery(&mut tx, claimed.id, attempt_no, state, retry.as_secs_f64()).await?;
        tx.commit().await?;
        Ok(moved)
    }

    /// Queues a test event for `hook`, delivered as every other; its event id.
    pub(crate) async fn queue_webhook_test(&self, hook: &Webhook, actor: &str) -> Result<Uuid, DbError> {
        let id = Uuid::now_v7();
        let now = self.now().await?;
        let payload = json!({
            "type": event_type("test"),
            "timestamp": now,
            "data": {"event_id": id, "webhook": hook.name, "requested_by": actor},
        })
        .to_string();
        let mut tx = self.db.begin_write().await?;
        db::webhooks::insert_test_event(&mut tx, id, &payload).await?;
        db::webhooks::insert_delivery(&mut tx, id, &hook.name).await?;
        tx.commit().await?;
        Ok(id)
    }

    /// The newest `limit` deliveries, of `webhook` and of events of `run` when given, newest first.
    pub(crate) async fn webhook_deliveries(
        &self,
        webhook: Option<&str>,
        run: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<Delivery>, DbError> {
        let (listed, attempts) = db::webhooks::list(&self.db, webhook, run, i64::from(limit)).await?;
        Ok(listed
            .into_iter()
            .map(|(id, event_id, kind, webhook, run_id, worker, state, made, created, next, finished, payload)| {
                let state = match state.as_str() {
                    "delivered" => DeliveryState::Delivered,
                    "failed" => DeliveryState::Failed,
                    _ => DeliveryState::Pending,
                };
                let attempts = attempts
                    .iter()
                    .filter(|a| a.0 == id)
                    .map(|a| DeliveryAttempt {
                        attempt: a.1,
                        daemon_id: a.2,
                        started_at: a.3.0,
                        duration_ms: a.4,
                        status_code: a.5,
                        response: a.6.clone(),
                        error: a.7.clone(),
                    })
                    .collect();
                Delivery {
                    id,
                    event_id,
                    event: event_type(&kind),
                    webhook,
                    run_id,
                    worker,
                    state,
                    attempts_made: made,
                    created_at: created.0,
                    next_attempt_at: (state == DeliveryState::Pending).then_some(next.0),
                    finished_at: finished.map(|f| f.0),
                    payload: serde_json::from_str(&payload).unwrap_or(Value::String(payload)),
                    attempts,
                }
            })
            .collect())
    }

    /// Forgets test events (and their deliveries) older than `age`; how many.
    pub(crate) async fn prune_webhook_tests(&self, age: Duration) -> Result<u64, DbError> {
        db::webhooks::prune_tests(&self.db, age).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test cases 1, 2 and 6 (a key longer than the block).
        assert_eq!(
            hex(&hmac_sha256(&[0x0b; 20], b"Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        assert_eq!(
            hex(&hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex(&hmac_sha256(&[0xaa; 131], b"Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn the_signature_is_standard_webhooks() {
        // The example of the Standard Webhooks specification's reference libraries.
        let key = crate::config::decode_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("a secret");
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            signature(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }
}
