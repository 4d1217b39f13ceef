//! The two formats of log lines: readable text for journald, and flat JSON whose every line carries the fields of
//! its enclosing spans (a run's `run_id` and `worker`) at the top level, for a log shipper and `jq`.

use std::fmt;

use serde_json::Value;
use tracing::{
    Event, Subscriber,
    field::{Field, Visit},
};
use tracing_subscriber::{
    fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields, format::Writer},
    registry::LookupSpan,
};

/// Text fields as the default formatter writes them (`message` bare, then `name=value`), without the `otel.*`
/// fields that only name and classify spans for the export.
pub(super) struct TextFields;

impl<'w> FormatFields<'w> for TextFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(&self, writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut visitor = TextVisitor { writer, first: true, result: Ok(()) };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct TextVisitor<'w> {
    writer: Writer<'w>,
    first: bool,
    result: fmt::Result,
}

impl Visit for TextVisitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() || field.name().starts_with("otel.") {
            return;
        }
        let separator = if self.first { "" } else { " " };
        self.first = false;
        self.result = match field.name() {
            "message" => write!(self.writer, "{separator}{value:?}"),
            name => write!(self.writer, "{separator}{}={value:?}", name.strip_prefix("r#").unwrap_or(name)),
        };
    }
}

/// One JSON object per event: `timestamp`, `level`, `target`, the innermost `span`'s name, the fields of every
/// enclosing span (outermost first, inner ones win) and the event's own fields (`message` among them), all at
/// the top level. `otel.*` fields are left out.
pub(super) struct FlatJson;

impl<S, N> FormatEvent<S, N> for FlatJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let meta = event.metadata();
        let mut line = Line::default();
        line.set("timestamp", chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true).into());
        line.set("level", meta.level().as_str().into());
        line.set("target", meta.target().into());
        if let Some(scope) = ctx.event_scope() {
            let mut innermost = None;
            for span in scope.from_root() {
                innermost = Some(span.name());
                let extensions = span.extensions();
                let Some(fields) = extensions.get::<FormattedFields<N>>() else { continue };
                if let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(fields) {
                    for (key, value) in fields {
                        line.set(&key, value);
                    }
                }
            }
            if let Some(name) = innermost {
                line.set("span", name.into());
            }
        }
        event.record(&mut line);
        let mut text = String::with_capacity(256);
        text.push('{');
        for (i, (key, value)) in line.0.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            text.push_str(&Value::from(key.as_str()).to_string());
            text.push(':');
            text.push_str(&value.to_string());
        }
        text.push('}');
        writeln!(writer, "{text}")
    }
}

/// The fields of one JSON line, in order; a later value replaces an earlier one of the same name.
#[derive(Default)]
struct Line(Vec<(String, Value)>);

impl Line {
    fn set(&mut self, key: &str, value: Value) {
        let key = key.strip_prefix("r#").unwrap_or(key);
        if key.starts_with("otel.") {
            return;
        }
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some((_, slot)) => *slot = value,
            None => self.0.push((key.to_owned(), value)),
        }
    }
}

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.set(field.name(), format!("{value:?}").into());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.set(field.name(), value.into());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.set(field.name(), value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.set(field.name(), value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.set(field.name(), value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.set(field.name(), value.into());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.set(field.name(), value.to_string().into());
    }
}
