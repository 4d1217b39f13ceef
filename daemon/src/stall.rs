//! The stall watchdog of one run: a worker with `stall_seconds` that reports no progress, item or checkpoint line
//! for that long is stopped (SIGTERM, the cancel grace, SIGKILL) and its run ends `interrupted` with the end
//! reason `stalled`, resumable from its checkpoint. The clock starts when the worker starts, so a slow start
//! (imports, loading a model) counts. The sentence names the last thing the run was seen doing: "no progress for
//! 600 s since doc-0412".

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use crate::{clock::far, progress::StdoutLine};

/// Names in the sentence are cut to this many characters.
const NAME_CHARS: usize = 120;

/// The watchdog's state: when it fires, and what it names.
#[derive(Debug)]
pub struct Watchdog {
    /// The run's `stall_seconds`; none: no watchdog.
    seconds: Option<u64>,
    /// The last activity (or the worker's start); none until the worker starts, and after it fired or was
    /// disarmed.
    last: Option<Instant>,
    /// The last item id or progress message seen.
    since: Option<String>,
    /// The last activity that named nothing, for a run that never named anything.
    unnamed: Option<&'static str>,
}

impl Watchdog {
    /// The watchdog of a run with `stall_seconds` (none: it never fires).
    pub fn new(stall_seconds: Option<u64>) -> Self {
        Self { seconds: stall_seconds.filter(|&s| s > 0), last: None, since: None, unnamed: None }
    }

    /// The worker started at `now`: the clock starts.
    pub fn started(&mut self, now: Instant) {
        if self.seconds.is_some() {
            self.last = Some(now);
        }
    }

    /// A line of the worker's stdout at `now`: a progress, item or checkpoint line is activity.
    pub fn saw(&mut self, now: Instant, line: &StdoutLine) {
        match line {
            StdoutLine::Progress(progress) => self.progress(now, progress),
            StdoutLine::Item(item) => self.item(now, item),
            StdoutLine::Checkpoint(_) => self.checkpoint(now),
            StdoutLine::Result(_) | StdoutLine::Config(_) | StdoutLine::Usage(_) | StdoutLine::Text => {}
        }
    }

    /// A `progress` line at `now`: its message (or its count) is what the run is doing.
    pub fn progress(&mut self, now: Instant, progress: &Value) {
        self.active(now, progress_name(progress), "its last progress line");
    }

    /// An `item` line at `now`: its id is what the run got to.
    pub fn item(&mut self, now: Instant, item: &Value) {
        let id = item.get("id").and_then(Value::as_str).filter(|id| !id.trim().is_empty());
        self.active(now, id.map(cut), "its last item line");
    }

    /// A `checkpoint` line at `now`: activity; it names nothing new (the item before it says where it was).
    pub fn checkpoint(&mut self, now: Instant) {
        self.active(now, None, "its last checkpoint");
    }

    fn active(&mut self, now: Instant, name: Option<String>, unnamed: &'static str) {
        if let Some(last) = self.last.as_mut() {
            *last = now;
        }
        match name {
            Some(name) => self.since = Some(name),
            None => self.unnamed = Some(unnamed),
        }
    }

    /// When it fires: the last activity plus `stall_seconds`; far away when there is no watchdog, the worker
    /// has not started, or it fired or was disarmed.
    pub fn due(&self) -> Instant {
        match (self.seconds, self.last) {
            (Some(seconds), Some(last)) => last.checked_add(Duration::from_secs(seconds)).unwrap_or_else(far),
            _ => far(),
        }
    }

    /// Stops watching: the run is being stopped for another reason, or the watchdog fired.
    pub fn disarm(&mut self) {
        self.last = None;
    }

    /// Fires: the sentence of the run's end, naming the last item id or progress message seen ("no progress for
    /// 600 s since doc-0412"), else the last line that named nothing ("since its last checkpoint"), else the
    /// start ("since the worker started"); it does not fire again.
    pub fn fire(&mut self) -> String {
        self.disarm();
        let since = self.since.as_deref().or(self.unnamed).unwrap_or("the worker started");
        format!("no progress for {} s since {since}", self.seconds.unwrap_or_default())
    }
}

/// What a progress line names: its `message`, else its count ("20 of 120 done", "20 done").
fn progress_name(progress: &Value) -> Option<String> {
    if let Some(message) = progress.get("message").and_then(Value::as_str).filter(|m| !m.trim().is_empty()) {
        return Some(cut(message.trim()));
    }
    let done = progress.get("done").filter(|d| d.is_number())?;
    Some(match progress.get("total").filter(|t| t.is_number()) {
        Some(total) => format!("{done} of {total} done"),
        None => format!("{done} done"),
    })
}

fn cut(text: &str) -> String {
    if text.chars().count() > NAME_CHARS {
        format!("{}…", text.chars().take(NAME_CHARS - 1).collect::<String>())
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn the_clock_starts_with_the_worker_and_each_activity_moves_it() {
        let t0 = Instant::now();
        let mut dog = Watchdog::new(Some(600));
        assert!(dog.due() > t0 + secs(86_000), "not armed before the worker starts");
        dog.started(t0);
        assert_eq!(dog.due(), t0 + secs(600), "a slow start counts");
        dog.progress(t0 + secs(10), &json!({"done": 1}));
        assert_eq!(dog.due(), t0 + secs(610));
        dog.item(t0 + secs(20), &json!({"id": "doc-0412", "outcome": "succeeded"}));
        dog.checkpoint(t0 + secs(30));
        assert_eq!(dog.due(), t0 + secs(630));
        assert_eq!(dog.fire(), "no progress for 600 s since doc-0412", "the checkpoint keeps the item's name");
        assert!(dog.due() > t0 + secs(86_000), "it fires once");
    }

    #[test]
    fn only_progress_item_and_checkpoint_lines_are_activity() {
        let t0 = Instant::now();
        let mut dog = Watchdog::new(Some(5));
        dog.started(t0);
        for text in [
            r#"{"config": {"model": "m"}}"#,
            r#"{"usage": {"tokens_in": 3}}"#,
            "loading the model",
            r#"{"result": {}}"#,
        ] {
            dog.saw(t0 + secs(4), &StdoutLine::parse(text));
        }
        assert_eq!(dog.due(), t0 + secs(5), "free text, config, usage and result lines are not progress");
        for (at, text) in
            [(1, r#"{"progress": {"done": 1}}"#), (2, r#"{"item": {"id": "d"}}"#), (3, r#"{"checkpoint": 1}"#)]
        {
            dog.saw(t0 + secs(at), &StdoutLine::parse(text));
            assert_eq!(dog.due(), t0 + secs(at + 5), "{text}");
        }
    }

    #[test]
    fn without_stall_seconds_it_never_fires() {
        let t0 = Instant::now();
        for seconds in [None, Some(0)] {
            let mut dog = Watchdog::new(seconds);
            dog.started(t0);
            dog.progress(t0, &json!({"done": 1}));
            assert!(dog.due() > t0 + secs(86_000), "{seconds:?}");
        }
    }

    #[test]
    fn a_disarmed_watchdog_stays_quiet_whatever_comes_after() {
        let t0 = Instant::now();
        let mut dog = Watchdog::new(Some(2));
        dog.started(t0);
        dog.disarm();
        dog.progress(t0 + secs(1), &json!({"message": "late"}));
        assert!(dog.due() > t0 + secs(86_000));
    }

    #[test]
    fn the_sentence_names_the_last_item_or_progress_message_or_the_start() {
        let mut dog = Watchdog::new(Some(2));
        dog.started(Instant::now());
        assert_eq!(dog.fire(), "no progress for 2 s since the worker started");
        let named = |lines: &[(&str, Value)]| {
            let mut dog = Watchdog::new(Some(5));
            let now = Instant::now();
            dog.started(now);
            for (kind, value) in lines {
                match *kind {
                    "progress" => dog.progress(now, value),
                    "item" => dog.item(now, value),
                    _ => dog.checkpoint(now),
                }
            }
            dog.fire()
        };
        assert_eq!(named(&[("progress", json!({"done": 20, "total": 120, "message": "batch 2"}))]), {
            "no progress for 5 s since batch 2"
        });
        assert_eq!(
            named(&[("progress", json!({"done": 20, "total": 120}))]),
            "no progress for 5 s since 20 of 120 done"
        );
        assert_eq!(named(&[("progress", json!({"done": 3}))]), "no progress for 5 s since 3 done");
        assert_eq!(
            named(&[("item", json!({"id": "doc-7"})), ("progress", json!({"message": "step 4"}))]),
            "no progress for 5 s since step 4",
            "the latest name wins"
        );
        assert_eq!(
            named(&[("item", json!({"id": "doc-7"})), ("progress", json!({})), ("checkpoint", json!(1))]),
            "no progress for 5 s since doc-7",
            "a line that names nothing keeps the name before it"
        );
        assert_eq!(named(&[("checkpoint", json!(1))]), "no progress for 5 s since its last checkpoint");
        assert_eq!(named(&[("progress", json!({"stage": "x"}))]), "no progress for 5 s since its last progress line");
        let long = named(&[("item", json!({"id": "x".repeat(500)}))]);
        assert!(long.chars().count() < 160 && long.ends_with('…'), "{long}");
    }
}
