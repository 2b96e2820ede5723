//! An LLM-style gateway: an axum service behind `ReserveLayer`. Each
//! request reserves an estimate of its tokens from the tenant's budget;
//! the (simulated) model answers with `x-usage-tokens`, and the layer
//! settles the reservation at that count (refunding an over-estimate,
//! charging an under-estimate even into debt). Runs in process, requests
//! sent through `tower::ServiceExt::oneshot`; prints each answer and the
//! budget left.
//!
//! ```text
//! cargo run -p drl-client --example llm_gateway
//! ```

use axum::Router;
use axum::body::Body;
use axum::routing::post;
use drl_client::extract::RequestView;
use drl_client::{Client, InProcess, ReserveLayer, Target, UsageHeader};
use http::{HeaderMap, Request, Response};
use tower::ServiceExt;

/// 2,000 tokens per tenant per hour.
const CONFIG: &str = "
limits:
  - name: tokens
    algorithm: fixed-window
    quota: 2000/h
";

/// The estimate: the client's `max-tokens` header, else 500.
fn classify(req: &RequestView<'_>) -> Option<Target> {
    let tenant = req.header("x-tenant")?;
    let estimate = req
        .header("max-tokens")
        .and_then(|m| m.parse().ok())
        .unwrap_or(500);
    Some(Target::new("tokens", tenant, estimate))
}

/// A stand-in for a model: reports the tokens it used (the prompt's
/// `x-prompt-tokens` plus a reply of 120).
async fn complete(headers: HeaderMap) -> Response<Body> {
    let prompt: u64 = headers
        .get("x-prompt-tokens")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0);
    let used = prompt + 120;
    Response::builder()
        .header("x-usage-tokens", used.to_string())
        .body(Body::from(format!("{used} tokens")))
        .unwrap()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::in_process(InProcess::from_yaml(CONFIG, "<llm_gateway>")?);
    let app = Router::new()
        .route("/v1/complete", post(complete))
        .layer(ReserveLayer::new(
            client.clone(),
            classify,
            UsageHeader::new("x-usage-tokens"),
        ));
    // (max-tokens estimate, prompt tokens): over- and under-estimates.
    let calls = [
        (500, 100),
        (500, 300),
        (300, 900),
        (500, 200),
        (100, 300),
        (50, 0),
    ];
    for (i, (estimate, prompt)) in calls.into_iter().enumerate() {
        let req = Request::post("/v1/complete")
            .header("x-tenant", "tenant-7")
            .header("max-tokens", estimate.to_string())
            .header("x-prompt-tokens", prompt.to_string())
            .body(Body::empty())?;
        let resp = app.clone().oneshot(req).await?;
        let status = resp.status();
        let used = resp
            .headers()
            .get("x-usage-tokens")
            .map(|v| v.to_str().unwrap_or("?").to_string());
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_string();
        let left = client.check("tokens", "tenant-7", 0).await?;
        match used {
            Some(u) => println!(
                "call {i}: {status}, estimated {estimate}, used {u}, budget left {}{}",
                left.remaining,
                if left.allowed { "" } else { " (in debt)" }
            ),
            None => println!(
                "call {i}: {status} (estimate {estimate} denied), budget left {}, Retry-After {retry_after} s",
                left.remaining
            ),
        }
    }
    Ok(())
}
