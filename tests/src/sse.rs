//! Server-Sent Events as a client reads them. Bytes arrive in pieces of any size (a TCP read, an HTTP/1.1 chunk,
//! a body frame) that need not end where an event or even a line ends, so an event counts only once the blank
//! line that ends it has arrived: a test then never asserts on half an event ([`Decoder`], [`EventStream`]). A
//! response read off a raw socket is first freed of its HTTP/1.1 head and chunked framing ([`http1_body`]).

use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use serde_json::Value;
use tokio::{io::AsyncReadExt, net::TcpStream};

/// One whole event.
#[derive(Debug, Clone)]
pub struct Event {
    /// Its `event:` field (`message` when it has none).
    pub name: String,
    /// Its `data:` lines, joined by newlines.
    pub data: String,
    /// When the read that completed it returned.
    pub at: Instant,
}

impl Event {
    /// The data as JSON (panics with the event when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("the data of {self:?} is not JSON: {e}"))
    }
}

/// Turns bytes into whole events, keeping what has not been ended yet.
#[derive(Debug, Default)]
pub struct Decoder {
    line: Vec<u8>,
    after_cr: bool,
    name: Option<String>,
    data: Vec<String>,
}

impl Decoder {
    /// Takes the next bytes; returns the events they end.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<Event> {
        let mut events = Vec::new();
        for &byte in bytes {
            match byte {
                // A line ends with CRLF, LF or CR; the LF of a CRLF split between two reads ends nothing more.
                b'\n' if self.after_cr => self.after_cr = false,
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    events.extend(self.end_line());
                }
                _ => {
                    self.after_cr = false;
                    self.line.push(byte);
                }
            }
        }
        events
    }

    fn end_line(&mut self) -> Option<Event> {
        let line = String::from_utf8_lossy(&std::mem::take(&mut self.line)).into_owned();
        if line.is_empty() {
            let name = self.name.take();
            if self.data.is_empty() {
                return None;
            }
            let data = std::mem::take(&mut self.data).join("\n");
            return Some(Event { name: name.unwrap_or_else(|| "message".to_owned()), data, at: Instant::now() });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = line.split_once(':').unwrap_or((&line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => self.name = Some(value.to_owned()),
            "data" => self.data.push(value.to_owned()),
            _ => {}
        }
        None
    }
}

/// An event stream read from any body: an axum `Body`'s data stream, a reqwest `bytes_stream`, or
/// [`http1_body`]. It reads only when asked to, so a client that stops asking stops reading.
pub struct EventStream<S> {
    body: S,
    decoder: Decoder,
    /// Every whole event so far, in order.
    pub events: Vec<Event>,
    /// Everything read so far, for failure messages.
    text: String,
    ended: bool,
}

impl<S, B, E> EventStream<S>
where
    S: Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
    E: std::fmt::Display,
{
    /// Reads `body`.
    pub fn new(body: S) -> Self {
        Self { body, decoder: Decoder::default(), events: Vec::new(), text: String::new(), ended: false }
    }

    /// Reads until `check` finds what it looks for among the whole events so far, and returns it; panics with
    /// `what` and everything read when the stream ends first or `within` passes.
    pub async fn until<T>(&mut self, within: Duration, what: &str, mut check: impl FnMut(&[Event]) -> Option<T>) -> T {
        let read = async {
            loop {
                if let Some(found) = check(&self.events) {
                    return found;
                }
                assert!(!self.ended, "the stream ended before {what}:\n{}", self.text);
                self.read().await;
            }
        };
        match tokio::time::timeout(within, read).await {
            Ok(found) => found,
            Err(_) => panic!("no {what} within {within:?}; the stream said:\n{}", self.text),
        }
    }

    /// Reads until a whole event named `name` whose JSON data satisfies `matches` has arrived (among all so far);
    /// returns that data.
    pub async fn event(&mut self, within: Duration, name: &str, matches: impl Fn(&Value) -> bool) -> Value {
        self.until(within, &format!("a matching {name:?} event"), |events| {
            events.iter().filter(|e| e.name == name).map(Event::json).find(|data| matches(data))
        })
        .await
    }

    /// The JSON data of the whole events named `name` so far, in order.
    pub fn named(&self, name: &str) -> Vec<Value> {
        self.events.iter().filter(|e| e.name == name).map(Event::json).collect()
    }

    /// Reads whatever comes until the stream ends; whether it ended within `within`.
    pub async fn ends_within(&mut self, within: Duration) -> bool {
        tokio::time::timeout(within, async {
            while !self.ended {
                self.read().await;
            }
        })
        .await
        .is_ok()
    }

    async fn read(&mut self) {
        match self.body.next().await {
            Some(Ok(bytes)) => {
                let bytes = bytes.as_ref();
                self.text.push_str(&String::from_utf8_lossy(bytes));
                self.events.extend(self.decoder.feed(bytes));
            }
            // A connection cut under the stream (its server stopped) ends it as surely as its last chunk.
            Some(Err(e)) => self.text.push_str(&format!("\n[read error: {e}]")),
            None => self.ended = true,
        }
    }
}

/// The body of the HTTP/1.1 response on `stream` (whose request was sent), freed of its head and, when it is
/// chunked, of its framing, in reads of at most `read_size` bytes. Panics when the answer is not 200.
pub fn http1_body(stream: TcpStream, read_size: usize) -> impl Stream<Item = std::io::Result<Vec<u8>>> + Unpin {
    let state = (stream, Http1::default(), vec![0u8; read_size]);
    Box::pin(futures::stream::unfold(state, |(mut stream, mut framing, mut buf)| async move {
        loop {
            if framing.done {
                return None;
            }
            match stream.read(&mut buf).await {
                Ok(0) => return None,
                Ok(n) => {
                    let body = framing.feed(&buf[..n]);
                    if !body.is_empty() {
                        return Some((Ok(body), (stream, framing, buf)));
                    }
                }
                Err(e) => return Some((Err(e), (stream, framing, buf))),
            }
        }
    }))
}

/// Where the reading of an HTTP/1.1 response stands.
#[derive(Debug, Default)]
struct Http1 {
    /// The head until its blank line.
    head: Option<Vec<u8>>,
    head_done: bool,
    chunked: bool,
    /// The chunk-size line being read.
    size_line: Vec<u8>,
    /// Bytes of the current chunk still to come.
    left: usize,
    /// The CRLF after a chunk's data still to skip.
    crlf: usize,
    done: bool,
}

impl Http1 {
    fn feed(&mut self, bytes: &[u8]) -> Vec<u8> {
        if !self.head_done {
            let head = self.head.get_or_insert_with(Vec::new);
            head.extend_from_slice(bytes);
            let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") else { return Vec::new() };
            let text = String::from_utf8_lossy(&head[..end]).to_ascii_lowercase();
            assert!(text.starts_with("http/1.1 200"), "the answer is not 200:\n{text}");
            self.chunked = text.lines().any(|l| l.starts_with("transfer-encoding:") && l.contains("chunked"));
            let rest = head.split_off(end + 4);
            self.head = None;
            self.head_done = true;
            return if self.chunked { self.chunks(&rest) } else { rest };
        }
        if self.chunked { self.chunks(bytes) } else { bytes.to_vec() }
    }

    fn chunks(&mut self, mut bytes: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        while !bytes.is_empty() && !self.done {
            if self.crlf > 0 {
                let skip = self.crlf.min(bytes.len());
                self.crlf -= skip;
                bytes = &bytes[skip..];
            } else if self.left > 0 {
                let take = self.left.min(bytes.len());
                body.extend_from_slice(&bytes[..take]);
                self.left -= take;
                if self.left == 0 {
                    self.crlf = 2;
                }
                bytes = &bytes[take..];
            } else {
                let Some(end) = bytes.iter().position(|b| *b == b'\n') else {
                    self.size_line.extend_from_slice(bytes);
                    break;
                };
                self.size_line.extend_from_slice(&bytes[..end]);
                bytes = &bytes[end + 1..];
                let line = String::from_utf8_lossy(&std::mem::take(&mut self.size_line)).into_owned();
                let size = line.trim().split(';').next().unwrap_or_default();
                self.left = usize::from_str_radix(size, 16).unwrap_or_else(|e| panic!("a chunk size {line:?}: {e}"));
                // The last chunk: what follows (trailers) is of no interest.
                self.done = self.left == 0;
            }
        }
        body
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_counts_only_once_its_blank_line_arrived_however_the_bytes_are_cut() {
        let text = "event: ready\r\ndata: {\"kind\":\"ready\"}\r\n\r\n: keep-alive\n\nevent: run\ndata: a\ndata:b\n\ndata: c\r\r";
        for cut in 1..text.len() {
            let (mut decoder, bytes) = (Decoder::default(), text.as_bytes());
            let mut events: Vec<(String, String)> = Vec::new();
            for piece in bytes.chunks(cut) {
                events.extend(decoder.feed(piece).into_iter().map(|e| (e.name, e.data)));
            }
            let expected = [("ready", "{\"kind\":\"ready\"}"), ("run", "a\nb"), ("message", "c")];
            let expected: Vec<(String, String)> =
                expected.iter().map(|(n, d)| ((*n).to_owned(), (*d).to_owned())).collect();
            assert_eq!(events, expected, "cut every {cut} bytes");
        }
        let mut decoder = Decoder::default();
        assert!(decoder.feed(b"event: run\ndata: {\"run\":\"this client f").is_empty(), "half an event is none");
        assert_eq!(decoder.feed(b"ell behind\"}\n\n")[0].data, "{\"run\":\"this client fell behind\"}");
    }

    #[test]
    fn a_chunked_response_is_freed_of_its_head_and_framing_however_the_bytes_are_cut() {
        let response = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n\
                        e\r\nevent: ready\n\n\r\n3;x=y\r\nabc\r\n0\r\n\r\n";
        for cut in 1..response.len() {
            let mut framing = Http1::default();
            let mut body = Vec::new();
            for piece in response.as_bytes().chunks(cut) {
                body.extend(framing.feed(piece));
            }
            assert_eq!(String::from_utf8_lossy(&body), "event: ready\n\nabc", "cut every {cut} bytes");
            assert!(framing.done);
        }
    }
}
