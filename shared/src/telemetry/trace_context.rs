//! W3C trace context across processes: a request's `traceparent` becomes the parent of its span, and a run
//! carries its own to the worker, so that one trace follows a run from the API through the daemon.

use opentelemetry::{
    Context,
    trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState},
};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Parses a W3C `traceparent` into a remote span context (`None` when it is not a valid one). A `tracestate` may
/// come with it.
pub fn remote_context(traceparent: &str, tracestate: Option<&str>) -> Option<SpanContext> {
    let mut parts = traceparent.trim().split('-');
    let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version.len() != 2 || version.eq_ignore_ascii_case("ff") || (version == "00" && parts.next().is_some()) {
        return None;
    }
    if trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
        return None;
    }
    let trace = TraceId::from_hex(trace).ok()?;
    let span = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let state = tracestate.and_then(|s| s.parse::<TraceState>().ok()).unwrap_or_default();
    let context = SpanContext::new(trace, span, TraceFlags::new(flags & 1), true, state);
    context.is_valid().then_some(context)
}

/// Makes `span` a child of the remote `traceparent` (for the OpenTelemetry export; a no-op when spans are not
/// exported or the text is not a valid trace context). Call it before the span is first entered.
pub fn continue_trace(span: &tracing::Span, traceparent: Option<&str>, tracestate: Option<&str>) {
    if let Some(remote) = traceparent.and_then(|tp| remote_context(tp, tracestate)) {
        let _ = span.set_parent(Context::new().with_remote_span_context(remote));
    }
}

/// The W3C `traceparent` of `span` as exported, or `None` when spans are not exported.
pub fn traceparent_of(span: &tracing::Span) -> Option<String> {
    let context = span.context();
    let span_ref = context.span();
    let sc = span_ref.span_context();
    sc.is_valid().then(|| format!("00-{}-{}-{:02x}", sc.trace_id(), sc.span_id(), sc.trace_flags().to_u8()))
}

/// Marks `span` as failed in the exported trace.
pub fn mark_failed(span: &tracing::Span, description: impl Into<String>) {
    span.set_status(opentelemetry::trace::Status::error(description.into()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_parse_as_the_w3c_spec_says() {
        let sc = remote_context("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None).expect("valid");
        assert_eq!(sc.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert!(sc.is_sampled() && sc.is_remote());
        let unsampled = remote_context("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", None);
        assert!(unsampled.is_some_and(|sc| !sc.is_sampled()));
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "garbage",
        ] {
            assert!(remote_context(bad, None).is_none(), "{bad}");
        }
    }
}
