//! [`MemoryStore`]: the embedded default, one [`KeyedLimiter`] per limit.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use drl_core::{Decision, KeyedConfig, KeyedLimiter, Mark, Reservation};
use parking_lot::RwLock;

use crate::{Check, LimitSpec, Store, StoreError};

/// In-process state with bounded memory per limit.
#[derive(Debug, Default)]
pub struct MemoryStore {
    config: KeyedConfig,
    limits: RwLock<HashMap<LimitSpec, Arc<KeyedLimiter<String>>>>,
}

impl MemoryStore {
    /// A store whose per-limit tables are bounded by `config`.
    pub fn new(config: KeyedConfig) -> Self {
        Self {
            config,
            limits: RwLock::new(HashMap::new()),
        }
    }

    /// The keyed limiter for `spec`, created on first use.
    pub fn limiter(&self, spec: &LimitSpec) -> Arc<KeyedLimiter<String>> {
        if let Some(l) = self.limits.read().get(spec) {
            return l.clone();
        }
        self.limits
            .write()
            .entry(spec.clone())
            .or_insert_with(|| Arc::new(KeyedLimiter::new(spec.limiter(), self.config)))
            .clone()
    }

    /// Decides synchronously (no await point): what the async method does.
    pub fn decide_now(&self, check: Check<'_>) -> Decision {
        self.limiter(check.spec)
            .decide(check.key, check.now, check.cost)
    }

    /// Charges synchronously (no await point): what [`Store::charge`] does.
    pub fn charge_now(&self, check: Check<'_>) -> Decision {
        self.limiter(check.spec)
            .charge(check.key, check.now, check.cost)
    }

    /// Checks synchronously (no await point, no write): what
    /// [`Store::check`] does.
    pub fn check_now(&self, check: Check<'_>) -> Decision {
        self.limiter(check.spec)
            .check(check.key, check.now, check.cost)
    }

    /// Reserves synchronously: what [`Store::reserve`] does.
    pub fn reserve_now(&self, check: Check<'_>) -> (Decision, Option<Box<[Mark]>>) {
        let (d, r) = self
            .limiter(check.spec)
            .reserve(check.key, check.now, check.cost, u64::MAX);
        (d, r.map(|r| r.marks().into()))
    }

    /// Refunds synchronously: what [`Store::refund`] does.
    pub fn refund_now(&self, check: Check<'_>, marks: &[Mark]) -> Decision {
        // Released at once, before its expiry: gives back `cost` units.
        let r = Reservation::new(
            check.key.to_string(),
            check.cost,
            check.now,
            u64::MAX,
            marks.into(),
        );
        self.limiter(check.spec).release(r, check.now).decision
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn decide(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        Ok(self.decide_now(check))
    }

    async fn charge(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        Ok(self.charge_now(check))
    }

    fn settles(&self) -> bool {
        true
    }

    async fn check(&self, check: Check<'_>) -> Result<Decision, StoreError> {
        Ok(self.check_now(check))
    }

    async fn reserve(
        &self,
        check: Check<'_>,
    ) -> Result<(Decision, Option<Box<[Mark]>>), StoreError> {
        Ok(self.reserve_now(check))
    }

    async fn refund(
        &self,
        check: Check<'_>,
        marks: &[Mark],
    ) -> Result<(Decision, u64), StoreError> {
        if marks.len() != check.spec.quotas.len() {
            return Err(StoreError::Invalid(format!(
                "{} marks for the {} quotas of limit {:?}",
                marks.len(),
                check.spec.quotas.len(),
                check.spec.name
            )));
        }
        Ok((self.refund_now(check, marks), check.cost))
    }

    fn retain(&self, specs: &[LimitSpec]) {
        self.limits.write().retain(|k, _| specs.contains(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drl_core::{Algorithm, Quota};

    #[tokio::test]
    async fn keeps_state_of_unchanged_limits_only() {
        let store = MemoryStore::default();
        let a = LimitSpec::new("a", Algorithm::Gcra, vec![Quota::new(2, 1_000).unwrap()]);
        let b = LimitSpec::new(
            "b",
            Algorithm::FixedWindow,
            vec![Quota::new(1, 1_000).unwrap()],
        );
        let c = |spec| Check {
            spec,
            key: "k",
            cost: 1,
            now: 10,
        };
        assert!(store.decide(c(&a)).await.unwrap().allowed);
        assert!(store.decide(c(&b)).await.unwrap().allowed);
        assert!(!store.decide(c(&b)).await.unwrap().allowed);
        store.retain(std::slice::from_ref(&b));
        // b kept its count, a starts fresh.
        assert!(!store.decide(c(&b)).await.unwrap().allowed);
        assert_eq!(store.decide(c(&a)).await.unwrap().remaining, 1);
    }

    #[tokio::test]
    async fn charges_past_the_limit() {
        let store = MemoryStore::default();
        let a = LimitSpec::new(
            "a",
            Algorithm::FixedWindow,
            vec![Quota::new(2, 60_000_000_000).unwrap()],
        );
        let c = |cost| Check {
            spec: &a,
            key: "k",
            cost,
            now: 10,
        };
        for _ in 0..3 {
            store.charge(c(1)).await.unwrap();
        }
        // Three charges on 2 per minute: in debt, a check-only query is denied.
        let q = store.decide(c(0)).await.unwrap();
        assert!(!q.allowed);
        assert_eq!(q.remaining, 0);
    }
}
