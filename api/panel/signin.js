// Signing a person in with the archive's identity provider (OpenID Connect, authorization code with PKCE), when
// the API says one is configured (`GET /api/signin`). The panel is a public client: no secret, a fresh verifier
// per sign-in kept in this tab only, and the access token it gets is used like a token typed in.

const PENDING_KEY = "scrinalia.signin";

function base64url(bytes) {
  let text = "";
  for (const b of bytes) text += String.fromCharCode(b);
  return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function randomText(bytes) {
  return base64url(crypto.getRandomValues(new Uint8Array(bytes)));
}

/** Where the identity provider sends the person back: the panel itself, without query or fragment. */
function redirectUri() {
  return `${location.origin}${location.pathname}`;
}

/** How people sign in here: the identity provider's settings, or null (a token is asked for). */
export async function signInOptions() {
  try {
    const response = await fetch("/api/signin", { headers: { Accept: "application/json" }, cache: "no-store" });
    if (!response.ok) return null;
    return (await response.json()).oidc ?? null;
  } catch {
    return null;
  }
}

/** Sends the person to the identity provider, remembering (in this tab) what the answer must match. */
export async function startSignIn(oidc) {
  const verifier = randomText(48);
  const state = randomText(24);
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)));
  const hash = location.hash && location.hash !== "#" ? location.hash : "#/workers";
  sessionStorage.setItem(PENDING_KEY, JSON.stringify({ verifier, state, hash, token_endpoint: oidc.token_endpoint,
    client_id: oidc.client_id }));
  const url = new URL(oidc.authorization_endpoint);
  const params = {
    response_type: "code", client_id: oidc.client_id, redirect_uri: redirectUri(), scope: oidc.scope, state,
    code_challenge: base64url(digest), code_challenge_method: "S256",
  };
  for (const [k, v] of Object.entries(params)) url.searchParams.set(k, v);
  location.assign(url.toString());
}

/**
 * Finishes a sign-in when the identity provider has sent the person back (`?code=…&state=…`, or `?error=…`):
 * resolves with the access token, or throws an Error whose message says what went wrong; resolves with null when
 * this page load is not a return from the identity provider. The query is removed from the address either way.
 */
export async function completeSignIn() {
  const query = new URLSearchParams(location.search);
  if (!query.has("code") && !query.has("error")) return null;
  const pending = JSON.parse(sessionStorage.getItem(PENDING_KEY) ?? "null");
  sessionStorage.removeItem(PENDING_KEY);
  history.replaceState(null, "", `${location.pathname}${pending?.hash ?? location.hash ?? ""}`);
  if (query.has("error")) {
    const why = query.get("error_description") || query.get("error");
    throw new Error(`The identity provider did not sign you in: ${why}.`);
  }
  if (!pending || pending.state !== query.get("state")) {
    throw new Error("This sign-in was not started from this tab (its state does not match); sign in again.");
  }
  const body = new URLSearchParams({
    grant_type: "authorization_code", code: query.get("code"), redirect_uri: redirectUri(),
    client_id: pending.client_id, code_verifier: pending.verifier,
  });
  let response;
  try {
    response = await fetch(pending.token_endpoint, { method: "POST", body, headers: { Accept: "application/json" } });
  } catch {
    throw new Error("The identity provider's token endpoint cannot be reached (or does not allow this origin).");
  }
  const answer = await response.json().catch(() => ({}));
  if (!response.ok || !answer.access_token) {
    const why = answer.error_description || answer.error || `status ${response.status}`;
    throw new Error(`The identity provider refused the sign-in: ${why}.`);
  }
  return answer.access_token;
}
