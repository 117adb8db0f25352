//! The network of a CLI agent: a namespace of its own whose only ways out are
//! the launcher's (see `chorus_sandbox::Network::Proxied`):
//!
//! - **forwards** for what it reaches over gRPC, which takes no proxy: the
//!   orchestrator and tool-exec, the OTLP collector its chorus-tools exports
//!   to, and the model endpoint when it is on the host's loopback (a local
//!   model server). An address on loopback keeps its address inside; another
//!   one is given a loopback address inside, and the variable naming it is
//!   rewritten to that address;
//! - the **proxy** for its model endpoint elsewhere (its `host:port`; the
//!   provider's usual endpoint without a base URL) and, when the agent holds
//!   the `network` grant, its egress list.
//!
//! Nothing else of the host is reachable: not its loopback (a database with
//! trust authentication), not the metadata address.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use chorus_sandbox::{EgressRule, Forward, Network};
use tracing::warn;

/// Variables naming a gRPC endpoint a CLI (through chorus-tools) reaches.
fn forwarded(name: &str) -> bool {
    name == "CHORUS_TOOLS_ADDR"
        || name == "CHORUS_ORCHESTRATOR_ADDR"
        || (name.starts_with("OTEL_EXPORTER_OTLP_") && name.ends_with("ENDPOINT"))
}

/// What a CLI agent's run needs to know for its network.
#[derive(Debug, Clone, Copy)]
pub struct CliReach<'a> {
    pub base_url: Option<&'a str>,
    /// Where it goes without a base URL (its provider's usual endpoints).
    pub default_hosts: &'a [&'static str],
    /// The agent's egress list, when it holds the `network` grant.
    pub egress: Option<&'a [String]>,
}

/// The network of a CLI agent, and its environment with the forwarded
/// addresses rewritten where they had to move.
pub fn confine(
    env: Vec<(String, String)>,
    reach: CliReach<'_>,
) -> (Network, Vec<(String, String)>) {
    let mut forwards: Vec<Forward> = Vec::new();
    let mut allow: Vec<EgressRule> = Vec::new();
    let env = env
        .into_iter()
        .map(|(name, value)| {
            if !forwarded(&name) {
                return (name, value);
            }
            match route(&value, &mut forwards) {
                Some(rewritten) => (name, rewritten),
                None => {
                    warn!(variable = %name, value = %value, "an agent's service address is not a URL or host:port; it is not reachable from the sandbox");
                    (name, value)
                }
            }
        })
        .collect::<Vec<_>>();
    let base_urls = reach.base_url.into_iter().chain(
        env.iter()
            .filter(|(name, _)| name == "ANTHROPIC_BASE_URL")
            .map(|(_, value)| value.as_str()),
    );
    let mut any_base_url = false;
    for url in base_urls {
        any_base_url = true;
        let Some((host, port)) = host_port(url) else {
            continue;
        };
        if is_loopback(&host) {
            // The same address inside: the URL stays as it is.
            let _ = route(url, &mut forwards);
        } else {
            allow.extend(rule(&host, port));
        }
    }
    if !any_base_url {
        for host in reach.default_hosts {
            allow.extend(rule(host, 443));
        }
    }
    for entry in reach.egress.unwrap_or_default() {
        match EgressRule::parse(entry) {
            Ok(rule) => allow.push(rule),
            Err(e) => {
                warn!(rule = %entry, error = %e, "an egress rule of the agent does not parse; it is left out")
            }
        }
    }
    allow.dedup();
    (Network::Proxied { allow, forwards }, env)
}

fn rule(host: &str, port: u16) -> Option<EgressRule> {
    let text = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    EgressRule::parse(&text).ok()
}

/// Adds a forward for `value` (a URL or `host:port`) and returns the value
/// the program uses: the same on loopback, else one naming the loopback
/// address the forward listens on inside.
fn route(value: &str, forwards: &mut Vec<Forward>) -> Option<String> {
    let (host, port) = host_port(value)?;
    let target = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    if is_loopback(&host) {
        let ip = match host.parse::<IpAddr>() {
            Ok(ip) => ip,
            // localhost: what a client tries first.
            Err(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        };
        let listen = SocketAddr::new(ip, port);
        if !forwards.iter().any(|f| f.listen == listen) {
            forwards.push(Forward {
                listen,
                connect: target,
            });
        }
        return Some(value.to_owned());
    }
    let listen = match forwards.iter().find(|f| f.connect == target) {
        Some(existing) => existing.listen,
        None => {
            let listen = free_loopback(forwards, port)?;
            forwards.push(Forward {
                listen,
                connect: target,
            });
            listen
        }
    };
    Some(replace_host(value, &host, port, &listen.ip().to_string()))
}

/// The first of 127.0.0.1, 127.0.0.2, ... not taken on `port` (and never the
/// egress proxy's own address).
fn free_loopback(forwards: &[Forward], port: u16) -> Option<SocketAddr> {
    (1..=250u8)
        .map(|last| SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, last)), port))
        .find(|candidate| {
            *candidate != chorus_sandbox::egress::PROXY_ADDR
                && !forwards.iter().any(|f| f.listen == *candidate)
        })
}

/// `value` with its host replaced (a URL or `host:port`).
fn replace_host(value: &str, host: &str, port: u16, new_host: &str) -> String {
    if let Ok(mut url) = reqwest::Url::parse(value)
        && url.has_host()
        && url.set_host(Some(new_host)).is_ok()
    {
        if url.port().is_none() && url.port_or_known_default() != Some(port) {
            let _ = url.set_port(Some(port));
        }
        return url.to_string();
    }
    let shown = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    value.replacen(&format!("{shown}:{port}"), &format!("{new_host}:{port}"), 1)
}

/// Host (IPv6 without brackets) and port of a URL or `host:port`.
fn host_port(value: &str) -> Option<(String, u16)> {
    let url = if value.contains("://") {
        value.to_owned()
    } else {
        format!("http://{value}")
    };
    let url = reqwest::Url::parse(&url).ok()?;
    let host = url.host_str()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Some((host.to_owned(), url.port_or_known_default()?))
}

fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<IpAddr>()
            .is_ok_and(|ip| chorus_sandbox::egress::canonical(ip).is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// Claude Code's reach: its API, unless a base URL names another.
    const ANTHROPIC: &[&str] = &["api.anthropic.com"];

    fn reach<'a>(default_hosts: &'a [&'static str], base_url: Option<&'a str>) -> CliReach<'a> {
        CliReach {
            base_url,
            default_hosts,
            egress: None,
        }
    }

    #[test]
    fn services_on_loopback_are_forwarded_at_their_own_address() {
        let (network, env) = confine(
            env(&[
                ("CHORUS_ORCHESTRATOR_ADDR", "http://127.0.0.1:50051"),
                ("CHORUS_TOOLS_ADDR", "127.0.0.1:50052"),
                ("LANG", "C"),
            ]),
            reach(ANTHROPIC, Some("http://127.0.0.1:11434/v1")),
        );
        let Network::Proxied { allow, forwards } = network else {
            panic!("not proxied: {network:?}");
        };
        let listens: Vec<String> = forwards.iter().map(|f| f.listen.to_string()).collect();
        assert_eq!(
            listens,
            ["127.0.0.1:50051", "127.0.0.1:50052", "127.0.0.1:11434"]
        );
        assert!(forwards.iter().all(|f| f.connect == f.listen.to_string()));
        assert!(allow.is_empty(), "{allow:?}");
        assert_eq!(env[0].1, "http://127.0.0.1:50051");
        assert_eq!(env[1].1, "127.0.0.1:50052");
    }

    #[test]
    fn services_elsewhere_get_a_loopback_address_inside() {
        let (network, env) = confine(
            env(&[
                ("CHORUS_ORCHESTRATOR_ADDR", "http://orchestrator:50051"),
                ("CHORUS_TOOLS_ADDR", "http://tool-exec:50051"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
            ]),
            reach(ANTHROPIC, Some("https://api.example.com/v1")),
        );
        let Network::Proxied { allow, forwards } = network else {
            panic!("not proxied");
        };
        assert_eq!(env[0].1, "http://127.0.0.1:50051/");
        assert_eq!(env[1].1, "http://127.0.0.2:50051/");
        assert_eq!(env[2].1, "http://127.0.0.1:4317/");
        assert_eq!(forwards[1].connect, "tool-exec:50051");
        let allowed: Vec<String> = allow.iter().map(ToString::to_string).collect();
        assert_eq!(allowed, ["api.example.com:443"]);
    }

    #[test]
    fn without_a_base_url_the_providers_endpoint_and_with_network_the_egress_list() {
        let egress = vec!["github.com:443".to_owned()];
        let (network, _) = confine(
            Vec::new(),
            CliReach {
                egress: Some(&egress),
                ..reach(ANTHROPIC, None)
            },
        );
        let Network::Proxied { allow, forwards } = network else {
            panic!("not proxied");
        };
        let allowed: Vec<String> = allow.iter().map(ToString::to_string).collect();
        assert_eq!(allowed, ["api.anthropic.com:443", "github.com:443"]);
        assert!(forwards.is_empty());
        let (network, _) = confine(Vec::new(), reach(&["api.openai.com", "models.dev"], None));
        let Network::Proxied { allow, .. } = network else {
            panic!("not proxied");
        };
        let allowed: Vec<String> = allow.iter().map(ToString::to_string).collect();
        assert_eq!(allowed, ["api.openai.com:443", "models.dev:443"]);
    }
}
