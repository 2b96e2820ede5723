//! The status page at `/` and its JSON, `GET /v1/status` (field names in
//! `docs/server.md`), rendered from `drl_service::status::snapshot`.
//!
//! - [`page`]: the server-rendered HTML (readable without JavaScript) and
//!   its embedded script, which re-renders from `/v1/status` every second.
//! - [`routes`]: the two handlers.

pub mod page;
pub mod routes;
