//! The native gRPC transport (`drl.v1.RateLimiter/Check`): one HTTP/2
//! connection (tonic `Channel`), reconnected on demand.

use tonic::Code;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};

use super::transport::{Item, SendError, SendFuture, Transport, decision};
use crate::Error;
use drl_api::{Op, Outcome};

/// drl's native API (`crates/drl-api/proto/drl/v1/ratelimit.proto`).
pub(crate) use drl_api::pb;

use pb::rate_limiter_client::RateLimiterClient;

pub(crate) struct Grpc {
    client: RateLimiterClient<Channel>,
    auth: Option<MetadataValue<tonic::metadata::Ascii>>,
}

impl Grpc {
    pub(crate) fn new(endpoint: &str, token: Option<&str>) -> Result<Self, Error> {
        let ep = Endpoint::from_shared(endpoint.to_string())
            .map_err(|e| Error::Setup(format!("gRPC endpoint {endpoint:?}: {e}")))?
            .tcp_nodelay(true);
        let auth = match token {
            Some(t) => Some(format!("Bearer {t}").parse().map_err(|_| {
                Error::Setup("the bearer token is not a valid header value".into())
            })?),
            None => None,
        };
        Ok(Self {
            client: RateLimiterClient::new(ep.connect_lazy()),
            auth,
        })
    }
}

impl Transport for Grpc {
    fn send(&self, batch: Vec<Item>) -> SendFuture {
        let mut client = self.client.clone();
        let mut req = tonic::Request::new(pb::CheckRequest {
            requests: batch
                .into_iter()
                .map(|i| {
                    let (mode, reservation_id) = match i.op {
                        Op::Take => (pb::Mode::Take, 0),
                        Op::Check => (pb::Mode::Check, 0),
                        Op::Charge => (pb::Mode::Charge, 0),
                        Op::Reserve => (pb::Mode::Reserve, 0),
                        Op::Settle(id) => (pb::Mode::Settle, id),
                        Op::Release(id) => (pb::Mode::Release, id),
                    };
                    pb::CheckItem {
                        limit: i.limit,
                        key: i.key,
                        cost: Some(i.cost),
                        mode: mode as i32,
                        reservation_id,
                    }
                })
                .collect(),
        });
        if let Some(a) = &self.auth {
            req.metadata_mut().insert("authorization", a.clone());
        }
        Box::pin(async move {
            match client.check(req).await {
                Ok(r) => Ok(r
                    .into_inner()
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
                        reservation: r.reservation_id,
                        charged: r.charged,
                        refunded: r.refunded,
                        expired: r.expired,
                    })
                    .collect()),
                Err(s) => Err(match s.code() {
                    Code::NotFound
                    | Code::InvalidArgument
                    | Code::Unauthenticated
                    | Code::PermissionDenied
                    | Code::OutOfRange => SendError::Refused {
                        not_found: s.code() == Code::NotFound,
                        message: s.message().to_string(),
                    },
                    _ => SendError::Unavailable(format!("gRPC {:?}: {}", s.code(), s.message())),
                }),
            }
        })
    }
}
