//! Exit codes, the errors that decide them, and how a failed command is reported on stderr.

use std::{fmt, io};

use reqwest::StatusCode;

/// The documented exit codes of `scrinalia` (also in `scrinalia --help` and docs/operations.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: done.
    Ok,
    /// 1: anything not listed below.
    Error,
    /// 2: a bad flag or argument (clap's own code).
    Usage,
    /// 3: the API cannot be reached.
    Unreachable,
    /// 4: 401 or 403.
    Unauthorized,
    /// 5: 404.
    NotFound,
    /// 6: 409, e.g. a run of that worker already in flight.
    Conflict,
    /// 7: 400, 413, 415 or 422.
    BadRequest,
    /// 8: the followed run ended without succeeding.
    RunNotSucceeded,
    /// 130: Ctrl-C while following a run (the run goes on), as a shell reports SIGINT.
    Interrupted,
}

impl Exit {
    /// The process exit status.
    pub fn code(self) -> u8 {
        match self {
            Self::Ok => 0,
            Self::Error => 1,
            Self::Usage => 2,
            Self::Unreachable => 3,
            Self::Unauthorized => 4,
            Self::NotFound => 5,
            Self::Conflict => 6,
            Self::BadRequest => 7,
            Self::RunNotSucceeded => 8,
            Self::Interrupted => 130,
        }
    }

    /// The exit code for an HTTP error status.
    pub fn for_status(status: StatusCode) -> Self {
        match status.as_u16() {
            401 | 403 => Self::Unauthorized,
            404 => Self::NotFound,
            409 => Self::Conflict,
            400 | 413 | 415 | 422 => Self::BadRequest,
            // A reverse proxy in front of the API answers these when the API itself is down.
            502 | 504 => Self::Unreachable,
            _ => Self::Error,
        }
    }
}

/// An error answer of the API: its status and, when the body is the API's `{code, message}`, those.
#[derive(Debug)]
pub struct ApiFailure {
    /// The HTTP status.
    pub status: StatusCode,
    /// The API's machine-readable code (`run_in_flight`, …), empty when the body was not the API's.
    pub code: String,
    /// The sentence to show.
    pub message: String,
}

impl fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ApiFailure {}

/// The API could not be reached at all.
#[derive(Debug)]
pub struct Unreachable {
    /// The base URL tried.
    pub api: String,
    /// What the HTTP client said.
    pub cause: String,
}

impl fmt::Display for Unreachable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot reach the API at {} ({}); is scrinalia-api running there? Set --api or SCRINALIA_API.",
            self.api, self.cause
        )
    }
}

impl std::error::Error for Unreachable {}

/// A command that ran to its end and wants a particular exit code, with a sentence for stderr (e.g. a followed
/// run that failed, or a health check that is not ok).
#[derive(Debug)]
pub struct Verdict {
    /// The exit code.
    pub exit: Exit,
    /// The sentence.
    pub message: String,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Verdict {}

/// The exit code an error calls for: the first error of the chain that decides one.
pub fn classify(err: &anyhow::Error) -> Exit {
    for cause in err.chain() {
        if let Some(v) = cause.downcast_ref::<Verdict>() {
            return v.exit;
        }
        if let Some(f) = cause.downcast_ref::<ApiFailure>() {
            return Exit::for_status(f.status);
        }
        if cause.is::<Unreachable>() {
            return Exit::Unreachable;
        }
    }
    Exit::Error
}

/// Whether the error is only stdout having been closed (`scrinalia runs | head`): not worth a message.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|c| c.downcast_ref::<io::Error>().is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe))
}

/// Reports the outcome of a command on stderr and returns its exit code. An API error prints the API's own
/// sentence (what the operator needs); other errors print their context chain.
pub fn finish(outcome: anyhow::Result<()>) -> Exit {
    let Err(err) = outcome else { return Exit::Ok };
    if is_broken_pipe(&err) {
        return Exit::Ok;
    }
    let api_sentence = err.chain().find_map(|c| c.downcast_ref::<ApiFailure>()).map(|f| f.message.clone());
    let verdict = err.chain().find_map(|c| c.downcast_ref::<Verdict>()).map(|v| v.message.clone());
    match verdict.or(api_sentence) {
        Some(sentence) => eprintln!("scrinalia: {sentence}"),
        None => eprintln!("scrinalia: {err:#}"),
    }
    classify(&err)
}

#[cfg(test)]
mod tests {
    use anyhow::Context;

    use super::*;

    fn failure(status: u16) -> anyhow::Error {
        let status = StatusCode::from_u16(status).expect("a status");
        anyhow::Error::new(ApiFailure { status, code: String::new(), message: "m".into() }).context("while doing x")
    }

    #[test]
    fn statuses_map_to_the_documented_codes() {
        let cases =
            [(401, 4), (403, 4), (404, 5), (409, 6), (400, 7), (422, 7), (413, 7), (500, 1), (503, 1), (502, 3)];
        for (status, code) in cases {
            assert_eq!(classify(&failure(status)).code(), code, "status {status}");
        }
    }

    #[test]
    fn unreachable_verdicts_and_plain_errors_have_their_codes() {
        let unreachable = anyhow::Error::new(Unreachable { api: "http://x".into(), cause: "refused".into() });
        assert_eq!(classify(&unreachable.context("listing runs")), Exit::Unreachable);
        let verdict = Verdict { exit: Exit::RunNotSucceeded, message: "failed".into() };
        assert_eq!(classify(&anyhow::Error::new(verdict)).code(), 8);
        let plain: anyhow::Result<()> = Err(anyhow::anyhow!("boom")).context("reading");
        assert_eq!(finish(plain), Exit::Error);
        assert_eq!(finish(Ok(())), Exit::Ok);
    }

    #[test]
    fn a_closed_stdout_is_not_an_error() {
        let pipe = anyhow::Error::new(io::Error::from(io::ErrorKind::BrokenPipe)).context("writing the table");
        assert_eq!(finish(Err(pipe)), Exit::Ok);
    }
}
