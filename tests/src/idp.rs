//! A test identity provider that really signs: RSA keys generated once per test binary, a JWKS served over HTTP
//! (which a test may rotate), and the two endpoints of an authorization code sign-in with PKCE (`/authorize`
//! answers at once for the person the test chose, `/token` checks the code, the client, the redirect URI and the
//! S256 verifier before it hands out a signed access token). It is the protocol of a real issuer, minus its login
//! page.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, OnceLock},
};

use axum::{
    Form, Json, Router,
    extract::{Query, State},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};
use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rsa::{RsaPrivateKey, pkcs1::EncodeRsaPrivateKey, traits::PublicKeyParts};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2_hmac::{Digest, Sha256};

/// The issuer the tokens name.
pub const ISSUER: &str = "https://idp.test/realms/archive";
/// The audience the tokens carry (the API's client id).
pub const AUDIENCE: &str = "scrinalia";
/// The client id the panel signs in as.
pub const PANEL_CLIENT: &str = "scrinalia-panel";

/// Two RSA keys, generated once for the whole test binary (generation takes a moment).
pub fn keys() -> &'static [RsaPrivateKey; 2] {
    static KEYS: OnceLock<[RsaPrivateKey; 2]> = OnceLock::new();
    KEYS.get_or_init(|| {
        let mut rng = rsa::rand_core::OsRng;
        let mut new = || RsaPrivateKey::new(&mut rng, 2048).expect("an RSA key");
        [new(), new()]
    })
}

/// Base64url without padding, as JOSE writes it.
pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn jwk(kid: &str, key: &RsaPrivateKey) -> Value {
    json!({"kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid,
        "n": b64(&key.n().to_bytes_be()), "e": b64(&key.e().to_bytes_be())})
}

/// Claims of a person: `groups` as given (a list or a string), valid for five minutes.
pub fn claims(sub: &str, name: Option<&str>, groups: Value) -> Value {
    let now = chrono::Utc::now().timestamp();
    let mut c = json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "iat": now, "exp": now + 300, "groups": groups});
    if let Some(name) = name {
        c["name"] = json!(name);
    }
    c
}

/// `claims` signed RS256 with key `index`, under `kid`.
pub fn sign(claims: &Value, kid: &str, index: usize) -> String {
    let der = keys()[index].to_pkcs1_der().expect("a DER key");
    let header = Header { kid: Some(kid.to_owned()), ..Header::new(Algorithm::RS256) };
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_rsa_der(der.as_bytes())).expect("a signed token")
}

/// A code handed out by `/authorize`, waiting for its exchange.
#[derive(Debug, Clone)]
struct Pending {
    challenge: String,
    client_id: String,
    redirect_uri: String,
}

/// What the provider saw: every exchange, and whether it was honoured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exchange {
    /// Whether a token was handed out.
    pub granted: bool,
    /// Why not, when not.
    pub refusal: Option<String>,
}

#[derive(Default)]
struct Provider {
    jwks: Value,
    /// Who `/authorize` signs in: the claims of the next access token.
    person: Option<Value>,
    codes: HashMap<String, Pending>,
    exchanges: Vec<Exchange>,
    authorizations: Vec<HashMap<String, String>>,
}

type Shared = Arc<Mutex<Provider>>;

/// The identity provider, served at `url` until the test ends.
pub struct Idp {
    state: Shared,
    /// Its base URL (`/jwks`, `/authorize`, `/token` below it).
    pub url: String,
}

impl Idp {
    /// Serves the provider on a free local port, publishing key `k1`.
    pub async fn start() -> Self {
        let state =
            Arc::new(Mutex::new(Provider { jwks: json!({"keys": [jwk("k1", &keys()[0])]}), ..Provider::default() }));
        let app = Router::new()
            .route("/jwks", get(|State(s): State<Shared>| async move { Json(s.lock().expect("idp").jwks.clone()) }))
            .route("/authorize", get(authorize))
            .route("/token", post(token).options(preflight))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port for the IdP");
        let url = format!("http://{}", listener.local_addr().expect("an address"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { state, url }
    }

    /// Publishes key `k2` in place of `k1`.
    pub fn rotate(&self) {
        self.state.lock().expect("idp").jwks = json!({"keys": [jwk("k2", &keys()[1])]});
    }

    /// Who the next sign-in signs in.
    pub fn sign_in_as(&self, person: Value) {
        self.state.lock().expect("idp").person = Some(person);
    }

    /// Every code exchange so far.
    pub fn exchanges(&self) -> Vec<Exchange> {
        self.state.lock().expect("idp").exchanges.clone()
    }

    /// The query of every `/authorize` request so far.
    pub fn authorizations(&self) -> Vec<HashMap<String, String>> {
        self.state.lock().expect("idp").authorizations.clone()
    }
}

fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
    (status, Json(json!({"error": error, "error_description": description}))).into_response()
}

/// The person "signs in" at once; the answer redirects back with a code, as after a login page.
async fn authorize(State(state): State<Shared>, Query(q): Query<HashMap<String, String>>) -> Response {
    let mut provider = state.lock().expect("idp");
    provider.authorizations.push(q.clone());
    let field = |k: &str| q.get(k).cloned().unwrap_or_default();
    if field("response_type") != "code" || field("code_challenge_method") != "S256" || field("client_id").is_empty() {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_request", "code with an S256 challenge is required");
    }
    let code = b64(&rand::random::<[u8; 16]>());
    let pending = Pending {
        challenge: field("code_challenge"),
        client_id: field("client_id"),
        redirect_uri: field("redirect_uri"),
    };
    provider.codes.insert(code.clone(), pending);
    let mut back = reqwest::Url::parse(&field("redirect_uri")).expect("a redirect URI");
    back.query_pairs_mut().append_pair("code", &code).append_pair("state", &field("state"));
    Redirect::to(back.as_str()).into_response()
}

#[derive(Debug, Deserialize)]
struct TokenForm {
    grant_type: String,
    code: String,
    redirect_uri: String,
    client_id: String,
    code_verifier: String,
}

/// The exchange: the code once, for the client and redirect URI it was given to, with the verifier whose S256
/// digest is the challenge. The panel calls it from its own origin, so it answers with CORS headers.
async fn token(State(state): State<Shared>, Form(form): Form<TokenForm>) -> Response {
    let mut provider = state.lock().expect("idp");
    let pending = provider.codes.remove(&form.code);
    let refusal = match &pending {
        _ if form.grant_type != "authorization_code" => Some("the grant type must be authorization_code"),
        None => Some("the code is unknown or was used already"),
        Some(p) if p.client_id != form.client_id => Some("the code was given to another client"),
        Some(p) if p.redirect_uri != form.redirect_uri => Some("the redirect URI differs from the authorization's"),
        Some(p) if b64(&Sha256::digest(form.code_verifier.as_bytes())) != p.challenge => {
            Some("the code verifier does not match the challenge")
        }
        Some(_) => None,
    };
    provider.exchanges.push(Exchange { granted: refusal.is_none(), refusal: refusal.map(str::to_owned) });
    let mut response = match (refusal, provider.person.clone()) {
        (Some(why), _) => oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", why),
        (None, None) => oauth_error(StatusCode::BAD_REQUEST, "access_denied", "nobody signs in here"),
        (None, Some(person)) => {
            Json(json!({"access_token": sign(&person, "k1", 0), "token_type": "Bearer", "expires_in": 300}))
                .into_response()
        }
    };
    response.headers_mut().insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    response
}

async fn preflight() -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    let h = response.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("POST"));
    h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, HeaderValue::from_static("accept, content-type"));
    response
}
