//! Deciding a trace's rows: one bookkeeping of reservations (open by id,
//! settled or released once, expiring), over two limits that answer the
//! same calls, drl-core's in this process and drl's Redis engines.

use std::collections::HashMap;

use anyhow::{Context, bail};
use drl_core::{Decision, Mark, MultiLimiter, State};
use drl_store::{Check, Store};

use super::Args;
use super::trace::{Kind, Row};

/// What one row did.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    /// The decision (for charge, settle and release: a query right after).
    pub decision: Decision,
    /// Units charged beyond the estimate (settle only).
    pub charged: u64,
    /// Units refunded (settle and release only).
    pub refunded: u64,
}

impl Outcome {
    fn of(decision: Decision) -> Self {
        Self {
            decision,
            charged: 0,
            refunded: 0,
        }
    }
}

/// The calls a trace makes of one limit (docs/semantics.md, "Costs known
/// afterwards"), each for one key at one stamp.
trait Limit {
    /// Takes, in order (a store pipelines them).
    fn takes(&mut self, rows: &[Row]) -> anyhow::Result<Vec<Decision>>;
    /// What a take of `cost` would get, changing nothing.
    fn check(&mut self, row: &Row, cost: u64) -> anyhow::Result<Decision>;
    /// Consumes `cost` whatever remains.
    fn charge(&mut self, row: &Row, cost: u64) -> anyhow::Result<Decision>;
    /// A take of `row.cost`, with its quotas' marks when admitted.
    fn reserve(&mut self, row: &Row) -> anyhow::Result<(Decision, Option<Box<[Mark]>>)>;
    /// Gives back up to `back` units of a reservation admitted with `marks`.
    fn refund(&mut self, row: &Row, marks: &[Mark], back: u64) -> anyhow::Result<Decision>;
}

/// drl-core's `MultiLimiter`, one state per key.
struct Memory {
    limiter: MultiLimiter,
    states: HashMap<String, Vec<State>>,
}

impl Memory {
    fn states(&mut self, key: &str) -> (&MultiLimiter, &mut Vec<State>) {
        if !self.states.contains_key(key) {
            let fresh = self.limiter.new_states();
            self.states.insert(key.to_owned(), fresh);
        }
        let states = self.states.get_mut(key).expect("inserted above");
        let limiter = &self.limiter;
        (limiter, states)
    }
}

impl Limit for Memory {
    fn takes(&mut self, rows: &[Row]) -> anyhow::Result<Vec<Decision>> {
        Ok(rows
            .iter()
            .map(|r| {
                let (l, s) = self.states(&r.key);
                l.decide(s, r.now, r.cost)
            })
            .collect())
    }

    fn check(&mut self, row: &Row, cost: u64) -> anyhow::Result<Decision> {
        let (l, s) = self.states(&row.key);
        Ok(l.check(s, row.now, cost))
    }

    fn charge(&mut self, row: &Row, cost: u64) -> anyhow::Result<Decision> {
        let (l, s) = self.states(&row.key);
        Ok(l.charge(s, row.now, cost))
    }

    fn reserve(&mut self, row: &Row) -> anyhow::Result<(Decision, Option<Box<[Mark]>>)> {
        let (l, s) = self.states(&row.key);
        Ok(l.reserve(s, row.now, row.cost))
    }

    fn refund(&mut self, row: &Row, marks: &[Mark], back: u64) -> anyhow::Result<Decision> {
        let (l, s) = self.states(&row.key);
        Ok(l.refund(s, row.now, marks, back))
    }
}

/// drl's Redis engines, with the trace's timestamps (the caller's clock).
struct Redis {
    rt: tokio::runtime::Runtime,
    store: drl_store::RedisStore,
    spec: drl_store::LimitSpec,
}

impl Redis {
    fn at<'a>(&'a self, row: &'a Row, cost: u64) -> Check<'a> {
        Check {
            spec: &self.spec,
            key: &row.key,
            cost,
            now: row.now,
        }
    }
}

/// The error for a row Redis failed to decide.
fn failed(row: &Row) -> String {
    format!(
        "Redis failed to decide the {} row at {} for key {:?}",
        row.kind.name(),
        row.now,
        row.key
    )
}

impl Limit for Redis {
    fn takes(&mut self, rows: &[Row]) -> anyhow::Result<Vec<Decision>> {
        let checks: Vec<_> = rows.iter().map(|r| self.at(r, r.cost)).collect();
        self.rt
            .block_on(self.store.decide_many(&checks))
            .into_iter()
            .zip(rows)
            .map(|(d, r)| d.with_context(|| failed(r)))
            .collect()
    }

    fn check(&mut self, row: &Row, cost: u64) -> anyhow::Result<Decision> {
        self.rt
            .block_on(self.store.check(self.at(row, cost)))
            .with_context(|| failed(row))
    }

    fn charge(&mut self, row: &Row, cost: u64) -> anyhow::Result<Decision> {
        self.rt
            .block_on(self.store.charge(self.at(row, cost)))
            .with_context(|| failed(row))
    }

    fn reserve(&mut self, row: &Row) -> anyhow::Result<(Decision, Option<Box<[Mark]>>)> {
        self.rt
            .block_on(self.store.reserve(self.at(row, row.cost)))
            .with_context(|| failed(row))
    }

    fn refund(&mut self, row: &Row, marks: &[Mark], back: u64) -> anyhow::Result<Decision> {
        self.rt
            .block_on(self.store.refund(self.at(row, back), marks))
            .map(|(d, _)| d)
            .with_context(|| failed(row))
    }
}

/// A reservation a reserve row opened.
struct Open {
    key: String,
    estimate: u64,
    expires_at: u64,
    /// The quotas' marks when admitted; `None`: denied (settles nothing).
    marks: Option<Box<[Mark]>>,
}

/// Decides a trace's rows in order on one limit, in memory or in Redis.
pub struct Replay {
    limit: Box<dyn Limit>,
    open: HashMap<String, Open>,
    ttl: u64,
}

impl Replay {
    /// The limit `args` describe, in memory or (with `--store`) in Redis.
    pub fn new(args: &Args, limiter: MultiLimiter) -> anyhow::Result<Self> {
        let limit: Box<dyn Limit> = match &args.store {
            None => Box::new(Memory {
                limiter,
                states: HashMap::new(),
            }),
            Some(url) => Box::new(connect(args, url, &limiter)?),
        };
        Ok(Self {
            limit,
            open: HashMap::new(),
            ttl: args.reservation_ttl_ms.saturating_mul(1_000_000),
        })
    }

    /// Decides `rows` in order; a run of takes goes to the limit at once.
    pub fn decide(&mut self, rows: &[Row]) -> anyhow::Result<Vec<Outcome>> {
        let mut out = Vec::with_capacity(rows.len());
        let mut rest = rows;
        while let Some(first) = rest.first() {
            if first.kind == Kind::Take {
                let n = rest
                    .iter()
                    .position(|r| r.kind != Kind::Take)
                    .unwrap_or(rest.len());
                let (run, tail) = rest.split_at(n);
                out.extend(self.limit.takes(run)?.into_iter().map(Outcome::of));
                rest = tail;
            } else {
                out.push(self.row(first)?);
                rest = &rest[1..];
            }
        }
        Ok(out)
    }

    /// One row other than a take, as docs/semantics.md ("Costs known
    /// afterwards") says; settle follows drl-core's `KeyedLimiter::settle`
    /// on the same parts.
    fn row(&mut self, row: &Row) -> anyhow::Result<Outcome> {
        let now = row.now;
        Ok(match row.kind {
            Kind::Take => Outcome::of(self.limit.takes(std::slice::from_ref(row))?[0]),
            Kind::Check => Outcome::of(self.limit.check(row, row.cost)?),
            Kind::Charge => Outcome::of(self.limit.charge(row, row.cost)?),
            Kind::Reserve => {
                if self.open.contains_key(&row.id) {
                    bail!(
                        "the row at {now} for key {:?} reserves id {:?}, which is still open",
                        row.key,
                        row.id
                    );
                }
                let (d, marks) = self.limit.reserve(row)?;
                self.open.insert(
                    row.id.clone(),
                    Open {
                        key: row.key.clone(),
                        estimate: row.cost,
                        expires_at: now.saturating_add(self.ttl),
                        marks,
                    },
                );
                Outcome::of(d)
            }
            Kind::Settle | Kind::Release => {
                let what = row.kind.name();
                let Some(r) = self.open.remove(&row.id) else {
                    bail!(
                        "the row at {now} for key {:?} {what}s id {:?}, which no reserve row opened (or is closed)",
                        row.key,
                        row.id
                    );
                };
                if r.key != row.key {
                    bail!(
                        "the row at {now} {what}s id {:?} for key {:?}, but it was reserved for key {:?}",
                        row.id,
                        row.key,
                        r.key
                    );
                }
                let actual = if row.kind == Kind::Release {
                    0
                } else {
                    row.cost
                };
                let Some(marks) = r.marks else {
                    // Denied: it holds nothing; the answer is a query.
                    return Ok(Outcome::of(self.limit.check(row, 0)?));
                };
                let expired = now >= r.expires_at;
                if actual > r.estimate {
                    let extra = actual - r.estimate;
                    Outcome {
                        decision: self.limit.charge(row, extra)?,
                        charged: extra,
                        refunded: 0,
                    }
                } else if actual < r.estimate && !expired {
                    let back = r.estimate - actual;
                    Outcome {
                        decision: self.limit.refund(row, &marks, back)?,
                        charged: 0,
                        refunded: back,
                    }
                } else {
                    Outcome::of(self.limit.check(row, 0)?)
                }
            }
        })
    }
}

/// Connects to the Redis (or Redis Cluster) at `url` for `args`.
fn connect(args: &Args, url: &str, limiter: &MultiLimiter) -> anyhow::Result<Redis> {
    let urls: Vec<&str> = url
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .collect();
    let mut cfg = match urls.as_slice() {
        [] => bail!("--store needs a URL such as redis://127.0.0.1:6379"),
        [one] => drl_store::RedisConfig::single(*one),
        many => drl_store::RedisConfig::cluster(many.iter().copied()),
    };
    cfg.time = drl_store::TimeSource::Caller;
    cfg.engine = args.redis_engine.unwrap_or_default();
    cfg.key_prefix = match &args.key_prefix {
        Some(p) => p.clone(),
        None => format!(
            "drl-replay:{}-{}:",
            std::process::id(),
            drl_core::Clock::now(&drl_core::SystemClock)
        ),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let store = rt
        .block_on(async {
            let s = drl_store::RedisStore::connect(&cfg).await?;
            s.ping().await?;
            Ok::<_, drl_store::StoreError>(s)
        })
        .with_context(|| format!("cannot reach Redis at {url}"))?;
    // Lua: loads the scripts; module: checks DRL.VERSION, so a missing
    // module is reported before the first row.
    rt.block_on(store.load_script())
        .with_context(|| format!("cannot decide with Redis at {url}"))?;
    let spec = drl_store::LimitSpec::new(
        "replay",
        args.algorithm,
        limiter.parts().iter().map(|l| *l.quota()).collect(),
    );
    Ok(Redis { rt, store, spec })
}
