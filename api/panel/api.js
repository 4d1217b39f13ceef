// The public HTTP API, as any client (the archive's own SPA too) would call it: JSON over fetch with an optional
// bearer token, and the live event stream.

const TOKEN_KEY = "scrinalia.token";

/** The token of this tab's session, if one was given. */
export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

/** Stores (or, with nothing, forgets) the token of this tab's session. */
export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** An error answered by the API: its status, code and sentence, and the whole body for extra fields. */
export class ApiError extends Error {
  constructor(status, body) {
    super(body?.message ?? `The API answered with status ${status}.`);
    this.status = status;
    this.code = body?.code ?? "unknown";
    this.body = body ?? {};
  }
}

function headers(extra) {
  const out = { Accept: "application/json", ...extra };
  const t = token();
  if (t) out.Authorization = `Bearer ${t}`;
  return out;
}

/** What `fetch` throwing means to a person (status 0: the API was not reached). */
function unreachable() {
  const message = "The API cannot be reached; check the connection and try again.";
  return new ApiError(0, { code: "unreachable", message });
}

/** Calls the API; resolves with the parsed JSON body, rejects with an `ApiError` (status 0: unreachable). */
export async function api(path, { method = "GET", body, signal } = {}) {
  let response;
  try {
    response = await fetch(path, {
      method,
      headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }),
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
      cache: "no-store",
    });
  } catch (e) {
    if (e?.name === "AbortError") throw e;
    throw unreachable();
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      // Not JSON (a proxy's error page, say): the status alone says what happened.
      data = null;
    }
  }
  if (!response.ok) {
    const message = `The API answered ${response.status} ${response.statusText}.`;
    throw new ApiError(response.status, data ?? { code: `http_${response.status}`, message });
  }
  return data;
}

/**
 * Streams a text resource (a run's log), calling `onText` with each decoded chunk as it arrives (and `onResponse`,
 * if given, with the response before its body, for its headers). Resolves when the response ends; rejects with an
 * `ApiError` on an error status.
 */
export async function streamText(path, onText, signal, onResponse) {
  let response;
  try {
    response = await fetch(path, { headers: headers({ Accept: "text/plain" }), signal, cache: "no-store" });
  } catch (e) {
    if (e?.name === "AbortError") throw e;
    throw unreachable();
  }
  if (!response.ok) {
    let body = null;
    try {
      body = await response.json();
    } catch {
      body = null;
    }
    throw new ApiError(response.status, body);
  }
  onResponse?.(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    if (value) onText(value);
  }
}

/**
 * The live event stream (`/api/events`, Server-Sent Events). Without a token it is a plain `EventSource`; with a
 * token it is read through fetch, because an `EventSource` cannot send an Authorization header. Either way it
 * reconnects by itself. Every (re)connection opens with `ready`, which names the kinds of event that follow (so
 * the panel listens for exactly those) and means that no change goes unheard from then on: `onOpen` is called
 * then, so that the caller can refetch what it may have missed. Returns a function that closes it.
 */
export function connectEvents({ onEvent, onOpen, onDown }) {
  if (!token()) {
    const source = new EventSource("/api/events");
    const listening = new Set();
    source.addEventListener("ready", (e) => {
      // The listeners outlive the reconnections, which all open with `ready` again: each is added once.
      for (const kind of JSON.parse(e.data).kinds) {
        if (listening.has(kind)) continue;
        listening.add(kind);
        source.addEventListener(kind, (k) => onEvent(JSON.parse(k.data)));
      }
      onOpen();
    });
    source.addEventListener("error", () => onDown());
    return () => source.close();
  }
  const controller = new AbortController();
  let kinds = new Set();
  // One event of the stream, dispatched like an EventSource would: by its name, or else by its kind.
  const dispatch = (block) => {
    let name = "";
    const data = [];
    for (const line of block.split("\n")) {
      if (line.startsWith("event:")) name = line.slice(6).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
    }
    // A block without data is a comment: the keep-alive.
    if (!data.length) return;
    const event = JSON.parse(data.join("\n"));
    name ||= event.kind;
    if (name === "ready") {
      kinds = new Set(event.kinds);
      onOpen();
    } else if (kinds.has(name)) onEvent(event);
  };
  (async () => {
    let delay = 1000;
    while (!controller.signal.aborted) {
      try {
        const response = await fetch("/api/events", {
          headers: headers({ Accept: "text/event-stream" }), signal: controller.signal, cache: "no-store",
        });
        if (!response.ok) throw new Error(`status ${response.status}`);
        delay = 1000;
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value.replaceAll("\r\n", "\n");
          let end;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            dispatch(buffer.slice(0, end));
            buffer = buffer.slice(end + 2);
          }
        }
      } catch {
        if (controller.signal.aborted) return;
      }
      onDown();
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, 15000);
    }
  })();
  return () => controller.abort();
}
