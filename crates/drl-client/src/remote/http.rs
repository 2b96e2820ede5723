//! The HTTP/JSON transport (`POST /v1/check`): a pooled HTTP/1.1 client.

use serde::{Deserialize, Serialize};

use super::transport::{Item, SendError, SendFuture, Transport, decision};
use crate::Error;
use drl_api::{Op, Outcome};

pub(crate) struct Http {
    client: reqwest::Client,
    url: String,
    auth: Option<String>,
}

#[derive(Serialize)]
struct Body<'a> {
    requests: &'a [Wire<'a>],
}

#[derive(Serialize)]
struct Wire<'a> {
    limit: &'a str,
    key: &'a str,
    cost: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reservation: Option<String>,
}

#[derive(Deserialize)]
struct Answer {
    results: Vec<WireResult>,
}

#[derive(Deserialize)]
struct WireResult {
    allowed: bool,
    limit: u64,
    remaining: u64,
    retry_after_ms: Option<u64>,
    reset_after_ms: u64,
    #[serde(default)]
    delay_ms: u64,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    reservation: Option<String>,
    #[serde(default)]
    charged: u64,
    #[serde(default)]
    refunded: u64,
    #[serde(default)]
    expired: bool,
}

#[derive(Deserialize)]
struct Problem {
    #[serde(default)]
    detail: String,
}

impl Http {
    pub(crate) fn new(endpoint: &str, token: Option<&str>) -> Result<Self, Error> {
        let base = endpoint.trim_end_matches('/');
        let url = format!("{base}/v1/check");
        reqwest::Url::parse(&url)
            .map_err(|e| Error::Setup(format!("HTTP endpoint {endpoint:?}: {e}")))?;
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            .build()
            .map_err(|e| Error::Setup(format!("HTTP client: {e}")))?;
        Ok(Self {
            client,
            url,
            auth: token.map(|t| format!("Bearer {t}")),
        })
    }
}

impl Transport for Http {
    fn send(&self, batch: Vec<Item>) -> SendFuture {
        let wire: Vec<Wire<'_>> = batch
            .iter()
            .map(|i| {
                let (mode, reservation) = match i.op {
                    Op::Take => (None, None),
                    Op::Check => (Some("check"), None),
                    Op::Charge => (Some("charge"), None),
                    Op::Reserve => (Some("reserve"), None),
                    Op::Settle(id) => (Some("settle"), Some(id.to_string())),
                    Op::Release(id) => (Some("release"), Some(id.to_string())),
                };
                Wire {
                    limit: &i.limit,
                    key: &i.key,
                    cost: i.cost,
                    mode,
                    reservation,
                }
            })
            .collect();
        let body = serde_json::to_vec(&Body { requests: &wire }).unwrap_or_default();
        let mut req = self
            .client
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(a) = &self.auth {
            req = req.header(reqwest::header::AUTHORIZATION, a);
        }
        Box::pin(async move {
            let resp = req
                .send()
                .await
                .map_err(|e| SendError::Unavailable(format!("HTTP: {e}")))?;
            let status = resp.status();
            let bytes = resp
                .bytes()
                .await
                .map_err(|e| SendError::Unavailable(format!("HTTP body: {e}")))?;
            if status.is_success() {
                let a: Answer = serde_json::from_slice(&bytes)
                    .map_err(|e| SendError::Unavailable(format!("HTTP: unreadable answer: {e}")))?;
                return Ok(a
                    .results
                    .into_iter()
                    .map(|r| Outcome {
                        decision: decision(
                            r.allowed,
                            r.limit,
                            r.remaining,
                            r.retry_after_ms,
                            r.reset_after_ms,
                            r.delay_ms,
                            &r.reason,
                        ),
                        reservation: r
                            .reservation
                            .as_deref()
                            .and_then(|id| id.parse().ok())
                            .unwrap_or(0),
                        charged: r.charged,
                        refunded: r.refunded,
                        expired: r.expired,
                    })
                    .collect());
            }
            let detail = serde_json::from_slice::<Problem>(&bytes)
                .map(|p| p.detail)
                .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).into_owned());
            match status.as_u16() {
                400 | 401 | 403 | 404 | 413 => Err(SendError::Refused {
                    not_found: status.as_u16() == 404,
                    message: format!("HTTP {status}: {detail}"),
                }),
                _ => Err(SendError::Unavailable(format!("HTTP {status}: {detail}"))),
            }
        })
    }
}
