//! `GET /` (the page) and `GET /v1/status` (its JSON). Both answer 404
//! when `status.enabled` is false, and sit behind `auth.tokens_file`
//! like the other APIs.

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::http::{AppState, problem};

static NO_STORE: HeaderValue = HeaderValue::from_static("no-store");
static HTML: HeaderValue = HeaderValue::from_static("text/html; charset=utf-8");
static JSON: HeaderValue = HeaderValue::from_static("application/json");
/// The page loads nothing but itself and fetches only `/v1/status`.
static CSP: HeaderValue = HeaderValue::from_static(
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
);

fn disabled() -> Response {
    problem(
        StatusCode::NOT_FOUND,
        "status_disabled",
        "Not Found",
        "the status page and /v1/status are off (status.enabled: false)",
    )
}

/// `GET /`: the status page.
pub async fn page(State(app): State<AppState>) -> Response {
    if !app.engine.status.enabled() {
        return disabled();
    }
    let body = super::page::render(&drl_service::status::snapshot::build(&app.engine));
    (
        [
            (header::CONTENT_TYPE, HTML.clone()),
            (header::CACHE_CONTROL, NO_STORE.clone()),
            (header::CONTENT_SECURITY_POLICY, CSP.clone()),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
        ],
        body,
    )
        .into_response()
}

/// `GET /v1/status`: the status document.
pub async fn json(State(app): State<AppState>) -> Response {
    if !app.engine.status.enabled() {
        return disabled();
    }
    let s = drl_service::status::snapshot::build(&app.engine);
    match serde_json::to_string(&s) {
        Ok(body) => (
            [
                (header::CONTENT_TYPE, JSON.clone()),
                (header::CACHE_CONTROL, NO_STORE.clone()),
            ],
            body,
        )
            .into_response(),
        Err(e) => problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            "status_failed",
            "Internal Server Error",
            &format!("could not encode the status: {e}"),
        ),
    }
}
