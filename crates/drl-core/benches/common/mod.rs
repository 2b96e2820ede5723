//! What drl-core's benches share.

use std::time::Duration;

use criterion::Criterion;

/// Short warm-up, 3 s of measurement, 30 samples: every row of these
/// benches in well under a minute.
pub fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30)
}
