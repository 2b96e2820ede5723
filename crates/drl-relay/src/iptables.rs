//! The capture rules: one chain `DRL-RELAY-<queue>` in the filter table
//! holding one `NFQUEUE` rule per class, jumped to from the configured
//! chain (OUTPUT, FORWARD or INPUT), optionally per interface.
//!
//! ```text
//! iptables -w -N DRL-RELAY-0
//! iptables -w -A DRL-RELAY-0 -d 10.9.0.0/16 -p tcp --dport 5001 \
//!          -j NFQUEUE --queue-num 0 --queue-bypass
//! iptables -w -I OUTPUT 1 -o veth0 -j DRL-RELAY-0
//! ```
//!
//! [`Rules::install`] first removes what an earlier run of the same queue
//! left behind; [`Rules::remove`] (also on drop) takes everything away.
//! [`Rules::commands`] is what an operator adds by hand with
//! `install_rules: false`.

use std::process::Command;

use crate::config::{Chain, Class, RelayConfig};

/// The installed rules (removed on drop).
#[derive(Debug)]
pub struct Rules {
    chain: String,
    parent: Chain,
    jump: Vec<String>,
    binaries: Vec<&'static str>,
    installed: bool,
}

/// The rules could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    /// No iptables binary.
    #[error(
        "{0} not found: install the iptables package (Debian: apt-get install iptables), or set \
         install_rules: false and add the rules yourself (drl relay --print-rules)"
    )]
    Missing(&'static str),
    /// iptables refused a rule.
    #[error("{cmd}: {stderr}{hint}")]
    Refused {
        /// The command line.
        cmd: String,
        /// What it said.
        stderr: String,
        /// What to do about it.
        hint: &'static str,
    },
}

fn class_args(c: &Class) -> Vec<String> {
    let m = &c.matches;
    let mut a = Vec::new();
    if let Some(s) = m.src {
        a.extend(["-s".to_string(), s.to_string()]);
    }
    if let Some(d) = m.dst {
        a.extend(["-d".to_string(), d.to_string()]);
    }
    if let Some(p) = m.proto {
        a.extend(["-p".to_string(), p.to_string()]);
        if let Some(s) = m.sport {
            a.extend(["--sport".to_string(), s.to_string()]);
        }
        if let Some(d) = m.dport {
            a.extend(["--dport".to_string(), d.to_string()]);
        }
    }
    if let Some(mark) = m.fwmark {
        a.extend(["-m", "mark", "--mark"].map(String::from));
        a.push(format!("{mark:#x}"));
    }
    a
}

/// The binaries (families) a class is captured in.
fn families(c: &Class, ipv6: bool) -> &'static [&'static str] {
    let v6 = c.matches.src.or(c.matches.dst).map(|p| p.is_v6());
    match v6 {
        Some(true) => &["ip6tables"],
        Some(false) => &["iptables"],
        None if ipv6 => &["iptables", "ip6tables"],
        None => &["iptables"],
    }
}

impl Rules {
    /// The rules `cfg` needs (nothing installed yet).
    pub fn plan(cfg: &RelayConfig) -> Self {
        let mut binaries: Vec<&'static str> = Vec::new();
        for c in &cfg.classes {
            for b in families(c, cfg.ipv6) {
                if !binaries.contains(b) {
                    binaries.push(b);
                }
            }
        }
        let mut jump = Vec::new();
        if let Some(i) = &cfg.interface {
            let flag = if cfg.chain == Chain::Input {
                "-i"
            } else {
                "-o"
            };
            jump.extend([flag.to_string(), i.clone()]);
        }
        Self {
            chain: format!("DRL-RELAY-{}", cfg.queue),
            parent: cfg.chain,
            jump,
            binaries,
            installed: false,
        }
    }

    /// The relay's chain name.
    pub fn chain(&self) -> &str {
        &self.chain
    }

    /// Every command (binary and arguments) that installs the rules.
    pub fn commands(&self, cfg: &RelayConfig) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        for &bin in &self.binaries {
            out.push(vec![
                bin.into(),
                "-w".into(),
                "-N".into(),
                self.chain.clone(),
            ]);
            for c in &cfg.classes {
                if !families(c, cfg.ipv6).contains(&bin) {
                    continue;
                }
                let mut cmd = vec![bin.into(), "-w".into(), "-A".into(), self.chain.clone()];
                cmd.extend(class_args(c));
                cmd.extend(["-m", "comment", "--comment"].map(String::from));
                cmd.push(format!("drl relay class {}", c.name));
                cmd.extend(["-j", "NFQUEUE", "--queue-num"].map(String::from));
                cmd.push(cfg.queue.to_string());
                if cfg.queue_bypass {
                    cmd.push("--queue-bypass".into());
                }
                out.push(cmd);
            }
            let mut cmd = vec![
                bin.into(),
                "-w".into(),
                "-I".into(),
                self.parent.name().into(),
                "1".into(),
            ];
            cmd.extend(self.jump.iter().cloned());
            cmd.extend(["-j".into(), self.chain.clone()]);
            out.push(cmd);
        }
        out
    }

    fn run(cmd: &[String]) -> Result<(), RulesError> {
        let bin: &'static str = if cmd[0] == "ip6tables" {
            "ip6tables"
        } else {
            "iptables"
        };
        let out = Command::new(&cmd[0])
            .args(&cmd[1..])
            .output()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => RulesError::Missing(bin),
                _ => RulesError::Refused {
                    cmd: cmd.join(" "),
                    stderr: e.to_string(),
                    hint: "",
                },
            })?;
        if out.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        let hint = if stderr.contains("Permission denied") || stderr.contains("you must be root") {
            " (the relay needs root, or CAP_NET_ADMIN and CAP_NET_RAW, to change iptables rules)"
        } else if stderr.contains("NFQUEUE") || stderr.contains("No chain/target/match") {
            " (the kernel lacks the NFQUEUE target: load xt_NFQUEUE / nfnetlink_queue)"
        } else {
            ""
        };
        Err(RulesError::Refused {
            cmd: cmd.join(" "),
            stderr,
            hint,
        })
    }

    /// Removes leftovers of an earlier run (quietly), then installs.
    pub fn install(&mut self, cfg: &RelayConfig) -> Result<(), RulesError> {
        self.cleanup();
        for cmd in self.commands(cfg) {
            if let Err(e) = Self::run(&cmd) {
                self.cleanup();
                return Err(e);
            }
            self.installed = true;
        }
        Ok(())
    }

    /// Removes the jump and the chain, ignoring what is already gone.
    /// Returns true if a jump was removed.
    pub fn cleanup(&mut self) -> bool {
        let mut removed = false;
        for &bin in &self.binaries {
            let q = |args: &[&str]| {
                Command::new(bin)
                    .args(args)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            };
            let mut del: Vec<&str> = vec!["-w", "-D", self.parent.name()];
            del.extend(self.jump.iter().map(String::as_str));
            del.extend(["-j", self.chain.as_str()]);
            // A jump may be there more than once (crashed runs).
            for _ in 0..16 {
                if !q(&del) {
                    break;
                }
                removed = true;
            }
            q(&["-w", "-F", &self.chain]);
            q(&["-w", "-X", &self.chain]);
        }
        self.installed = false;
        removed
    }

    /// Removes the rules (what drop does).
    pub fn remove(&mut self) {
        if self.installed {
            self.cleanup();
        }
    }
}

impl Drop for Rules {
    fn drop(&mut self) {
        self.remove();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_for_a_config() {
        let cfg = RelayConfig::parse(
            "t",
            "queue: 4\ninterface: veth0\nclasses:\n  - name: a\n    match: { dst: 10.0.0.0/8, \
             protocol: tcp, dport: 5001 }\n    quota: 1MB/s\n  - name: b\n    match: { src: \
             2001:db8::/32, fwmark: 16 }\n    quota: 1MB/s\n",
        )
        .unwrap();
        let r = Rules::plan(&cfg);
        let cmds: Vec<String> = r.commands(&cfg).iter().map(|c| c.join(" ")).collect();
        assert_eq!(
            cmds,
            vec![
                "iptables -w -N DRL-RELAY-4",
                "iptables -w -A DRL-RELAY-4 -d 10.0.0.0/8 -p 6 --dport 5001 -m comment \
                 --comment drl relay class a -j NFQUEUE --queue-num 4 --queue-bypass",
                "iptables -w -I OUTPUT 1 -o veth0 -j DRL-RELAY-4",
                "ip6tables -w -N DRL-RELAY-4",
                "ip6tables -w -A DRL-RELAY-4 -s 2001:db8::/32 -m mark --mark 0x10 -m comment \
                 --comment drl relay class b -j NFQUEUE --queue-num 4 --queue-bypass",
                "ip6tables -w -I OUTPUT 1 -o veth0 -j DRL-RELAY-4",
            ]
        );
    }
}
