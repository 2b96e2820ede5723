//! Settings that exist only in test builds (cargo feature
//! `fault-injection`), and how a build without them refuses them: a
//! config that sets `cluster.faults` or `orbit.fault` fails to load with
//! an error that names the key and the feature, instead of being taken
//! and ignored.
#![cfg_attr(feature = "fault-injection", allow(dead_code))]

use serde::Deserializer;
use serde::de::Error as _;

/// Why a test-only `key` is refused.
pub(crate) fn refused(key: &str) -> String {
    format!(
        "`{key}` is a test-only setting; this build has no fault injection \
         (cargo feature drl-cluster-net/fault-injection)"
    )
}

/// serde `deserialize_with` for `cluster.faults` in a build without it.
pub(crate) fn cluster_faults<'de, D: Deserializer<'de>, T>(_: D) -> Result<T, D::Error> {
    Err(D::Error::custom(refused("cluster.faults")))
}

/// serde `deserialize_with` for `orbit.fault` in a build without it.
pub(crate) fn orbit_fault<'de, D: Deserializer<'de>, T>(_: D) -> Result<T, D::Error> {
    Err(D::Error::custom(refused("orbit.fault")))
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    /// The shape of both sections in a build without the feature.
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Section {
        #[serde(default, deserialize_with = "super::cluster_faults")]
        #[allow(dead_code)]
        faults: Option<()>,
        #[serde(default, deserialize_with = "super::orbit_fault")]
        #[allow(dead_code)]
        fault: Option<()>,
    }

    #[test]
    fn a_build_without_fault_injection_refuses_the_keys_by_name() {
        assert!(serde_norway::from_str::<Section>("{}").is_ok());
        let e = serde_norway::from_str::<Section>("faults: {drop_rate: 0.1}")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`cluster.faults` is a test-only setting")
                && e.contains("drl-cluster-net/fault-injection"),
            "{e}"
        );
        let e = serde_norway::from_str::<Section>("fault: {}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`orbit.fault` is a test-only setting"), "{e}");
    }
}
