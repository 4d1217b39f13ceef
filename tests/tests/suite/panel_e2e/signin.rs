//! A curator signs in to the panel with the archive's identity provider (authorization code with PKCE, the
//! test's provider checking the S256 verifier), becomes the person in the panel, and the run they trigger names
//! them; a sign-in the provider refuses says why, and the token form stays for scripts.

use reqwest::Method;
use scrinalia_shared::config::PanelSignIn;
use scrinalia_tests::{
    Kind,
    browser::Browser,
    eventually,
    idp::{Exchange, Idp, PANEL_CLIENT, claims},
    system::VIEWER,
};
use serde_json::json;
use std::time::Duration;

use crate::api_oidc::start_with;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_curator_signs_in_with_the_identity_provider_and_their_run_names_them() {
    let idp = Idp::start().await;
    let panel = PanelSignIn {
        client_id: PANEL_CLIENT.to_owned(),
        authorization_endpoint: format!("{}/authorize", idp.url),
        token_endpoint: format!("{}/token", idp.url),
        ..PanelSignIn::default()
    };
    let system = start_with(Kind::Sqlite, &idp, Some(panel)).await;
    let signin = system.http(Method::GET, "/api/signin", "", None).await.expect("the API answers").json();
    assert_eq!(signin["oidc"]["client_id"], PANEL_CLIENT, "{signin}");

    let browser = Browser::start("signin", system.db.dir.path(), 1280, 900).await;
    // The person the provider will sign in has no mapped group: the API refuses them, and the panel says why.
    idp.sign_in_as(claims("eve-sub", Some("Eve Visitor"), json!(["visitors"])));
    browser.goto(&format!("{}/#/runs", system.api_url)).await;
    browser.wait_for_text("main h1", "Sign in").await;
    browser.click("#oidc-signin").await;
    browser.wait_for_text("#session .error", "none of \"visitors\" maps to a role").await;

    // A curator (an operator) signs in: the provider is asked for a code with an S256 challenge, the verifier
    // matches at the exchange, and the panel is theirs, back on the view they left.
    browser.click("#session button.link").await;
    browser.wait_for("#oidc-signin").await;
    idp.sign_in_as(claims("cora-sub", Some("Cora Curator"), json!(["archive-operators"])));
    browser.click("#oidc-signin").await;
    browser.wait_for_text("#who[data-role=\"operator\"]", "Cora Curator <cora-sub>").await;
    let asked = idp.authorizations().pop().expect("an authorization request");
    assert_eq!(asked.get("code_challenge_method").map(String::as_str), Some("S256"), "{asked:?}");
    assert_eq!(asked.get("redirect_uri"), Some(&format!("{}/", system.api_url)), "{asked:?}");
    assert_eq!(idp.exchanges().last(), Some(&Exchange { granted: true, refusal: None }));
    let url = browser.js("return location.href;", vec![]).await;
    assert_eq!(url, json!(format!("{}/#/runs", system.api_url)), "the code leaves the address");
    super::docs_screenshot(&browser, "signin-curator").await;

    // The run the curator triggers from the panel (the Run of its worker's row in the overview) names them.
    browser.goto(&format!("{}/#/workers", system.api_url)).await;
    let run_button = "tr.worker-row[data-worker=\"probe-1\"] button.run";
    browser
        .wait("the Run button of probe-1 to be enabled", || async {
            browser.is_enabled(run_button).await?.then_some(())
        })
        .await;
    browser.click(run_button).await;
    let runs = eventually(Duration::from_secs(20), "the curator's run in the ledger", || async {
        let reply = system.http(Method::GET, "/api/runs", VIEWER, None).await.ok()?;
        let runs = reply.json()["runs"].as_array()?.clone();
        (!runs.is_empty()).then_some(runs)
    })
    .await;
    assert_eq!(runs[0]["requested_by"], "Cora Curator <cora-sub>", "{runs:?}");
    browser.close().await;
    system.cleanup().await;
}
