//! An LLM-style token budget: each call reserves an estimate of its
//! tokens, and settles the reservation with the count the model's
//! response reports (refunding what was over-estimated, charging what was
//! under). Runs in process with a simulated model; prints the budget.
//!
//! ```text
//! cargo run -p drl-client --example llm_budget
//! ```

use drl_client::{Client, InProcess};

/// 10,000 tokens per tenant per hour.
const CONFIG: &str = "
limits:
  - name: tokens
    algorithm: fixed-window
    quota: 10000/h
";

/// A stand-in for a model call: the tokens its response used.
fn model_call(prompt: &str, round: u64) -> u64 {
    prompt.len() as u64 * 3 + (round * 997) % 1_500
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::in_process(InProcess::from_yaml(CONFIG, "<llm_budget>")?);
    let estimate = 1_000;
    for round in 0..12u64 {
        let permit = client.reserve("tokens", "tenant-7", estimate).await?;
        if !permit.allowed() {
            let d = permit.decision();
            println!(
                "call {round:2}: denied, {} tokens left, retry after {} s",
                d.remaining,
                d.retry_after.unwrap_or(0).div_ceil(1_000_000_000)
            );
            continue;
        }
        let used = model_call("summarise this document", round);
        let s = permit.settle(used).await?;
        println!(
            "call {round:2}: reserved {estimate}, used {used:4} (refunded {:4}, charged {:3}), budget left {:5}{}",
            s.refunded,
            s.charged,
            s.decision.remaining,
            if s.decision.allowed { "" } else { " (in debt)" }
        );
    }
    Ok(())
}
