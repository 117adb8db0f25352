//! Egress of a proxied sandbox (see [`crate::Network::Proxied`]): which
//! destinations an agent may reach through the launcher's proxy, and which
//! addresses it never reaches whatever its rules say.
//!
//! A rule is `host:port`: an exact name (`github.com:443`), every name below a
//! domain (`*.npmjs.org:443`, not `npmjs.org` itself), or an address
//! (`10.200.0.2:8080`, `[2001:db8::1]:443`). The proxy resolves names itself,
//! once, and connects only to the addresses it checked:
//!
//! - never loopback, unspecified, link-local (the cloud metadata address
//!   169.254.169.254 among them), multicast, broadcast or reserved addresses,
//!   also when written IPv4-mapped (`::ffff:127.0.0.1`) or IPv4-compatible;
//! - private and shared ranges (10/8, 172.16/12, 192.168/16, 100.64/10,
//!   198.18/15, fc00::/7, fec0::/10) and the host's own addresses only when a
//!   rule names that exact address.
//!
//! Host spellings that resolvers read as numbers (`2130706433`, `0177.0.0.1`,
//! `0x7f.1`) are refused: an address is written in dotted decimal or in
//! brackets.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use serde::{Deserialize, Serialize};

/// Where the proxy listens inside a proxied sandbox's network namespace.
pub const PROXY_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 3128);

/// Most forwards one sandbox may have.
pub const MAX_FORWARDS: usize = 32;

/// One allowed destination: a host pattern and a port.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct EgressRule {
    host: Pattern,
    port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Pattern {
    /// Exactly this name (lower case, no trailing dot).
    Name(String),
    /// Every name ending with this suffix (which starts with a dot).
    Below(String),
    /// Exactly this address.
    Ip(IpAddr),
}

/// A destination a sandboxed program asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    pub host: Host,
    pub port: u16,
}

/// A destination's host: a name to resolve, or an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    Name(String),
    Ip(IpAddr),
}

/// A fixed TCP forward: connections to `listen` inside the sandbox go to
/// `connect` (`host:port`, as the launcher's side resolves it), and nowhere
/// else. For what a CLI agent must reach: the Chorus services, a model
/// endpoint on the host's loopback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forward {
    /// A loopback address and port inside the sandbox.
    pub listen: SocketAddr,
    /// Where its connections go.
    pub connect: String,
}

impl EgressRule {
    /// Parses `host:port` (see the module's documentation).
    ///
    /// # Errors
    /// A message saying what is wrong with `text`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (host, port) = split_host_port(text)?;
        let host = if let Some(domain) = host.strip_prefix("*.") {
            let domain = name(domain).map_err(|e| format!("'{text}': {e}"))?;
            Pattern::Below(format!(".{domain}"))
        } else {
            match parse_host(host).map_err(|e| format!("'{text}': {e}"))? {
                Host::Name(name) => Pattern::Name(name),
                Host::Ip(ip) => Pattern::Ip(ip),
            }
        };
        Ok(Self { host, port })
    }

    /// Whether this rule allows `destination`.
    pub fn allows(&self, destination: &Destination) -> bool {
        if self.port != destination.port {
            return false;
        }
        match (&self.host, &destination.host) {
            (Pattern::Name(rule), Host::Name(name)) => rule == name,
            (Pattern::Below(suffix), Host::Name(name)) => name.ends_with(suffix.as_str()),
            (Pattern::Ip(rule), Host::Ip(ip)) => rule == ip,
            _ => false,
        }
    }

    /// Whether this rule names `ip` exactly (which lets the proxy reach a
    /// private address).
    pub fn names_address(&self, ip: IpAddr) -> bool {
        matches!(self.host, Pattern::Ip(rule) if rule == ip)
    }

    /// The rule's port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl fmt::Display for EgressRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Pattern::Name(name) => write!(f, "{name}:{}", self.port),
            Pattern::Below(suffix) => write!(f, "*{suffix}:{}", self.port),
            Pattern::Ip(IpAddr::V4(ip)) => write!(f, "{ip}:{}", self.port),
            Pattern::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]:{}", self.port),
        }
    }
}

impl TryFrom<String> for EgressRule {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        Self::parse(&text)
    }
}

impl From<EgressRule> for String {
    fn from(rule: EgressRule) -> Self {
        rule.to_string()
    }
}

impl Destination {
    /// Parses a request's `host:port` (CONNECT's authority form).
    ///
    /// # Errors
    /// A message saying what is wrong with `text`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (host, port) = split_host_port(text)?;
        Ok(Self {
            host: parse_host(host)?,
            port,
        })
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Host::Name(name) => write!(f, "{name}:{}", self.port),
            Host::Ip(IpAddr::V4(ip)) => write!(f, "{ip}:{}", self.port),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]:{}", self.port),
        }
    }
}

/// `host:port` or `[v6]:port`, with a port in 1..=65535.
fn split_host_port(text: &str) -> Result<(&str, u16), String> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, port) = rest
            .split_once(']')
            .ok_or_else(|| format!("'{text}': an IPv6 address needs its closing ']'"))?;
        let port = port
            .strip_prefix(':')
            .ok_or_else(|| format!("'{text}' has no port: write host:port"))?;
        (host, port)
    } else {
        text.rsplit_once(':')
            .ok_or_else(|| format!("'{text}' has no port: write host:port"))?
    };
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("'{text}': the port must be a number from 1 to 65535"))?;
    if host.is_empty() {
        return Err(format!("'{text}' has no host"));
    }
    Ok((host, port))
}

/// An address (dotted decimal, or IPv6 as given inside brackets), else a name.
fn parse_host(host: &str) -> Result<Host, String> {
    if let Ok(ip) = host.parse::<Ipv4Addr>() {
        return Ok(Host::Ip(IpAddr::V4(ip)));
    }
    if host.contains(':') {
        return host
            .parse::<Ipv6Addr>()
            .map(|ip| Host::Ip(canonical(IpAddr::V6(ip))))
            .map_err(|_| format!("'{host}' is not an IPv6 address"));
    }
    name(host).map(Host::Name)
}

/// A DNS name, lower-cased and without a trailing dot.
fn name(text: &str) -> Result<String, String> {
    let lower = text.trim_end_matches('.').to_ascii_lowercase();
    if lower.is_empty() || lower.len() > 253 {
        return Err(format!("'{text}' is not a host name"));
    }
    for label in lower.split('.') {
        let valid = !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !valid {
            return Err(format!("'{text}' is not a host name"));
        }
    }
    // Resolvers read all-number spellings (2130706433, 0177.0.0.1, 0x7f.1) as
    // addresses; no real name ends with such a label.
    let last = lower.rsplit('.').next().unwrap_or_default();
    if last.bytes().all(|b| b.is_ascii_digit())
        || (last.starts_with("0x") && last[2..].bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return Err(format!(
            "'{text}' spells an address as a number; write it in dotted decimal (a.b.c.d)"
        ));
    }
    Ok(lower)
}

/// An IPv6 address that carries an IPv4 one (mapped or compatible) as that
/// IPv4 address.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return IpAddr::V4(v4);
            }
            let octets = v6.octets();
            // ::a.b.c.d (deprecated "IPv4-compatible"), but not :: and ::1.
            if octets[..12].iter().all(|b| *b == 0)
                && u32::from_be_bytes([octets[12], octets[13], octets[14], octets[15]]) > 1
            {
                return IpAddr::V4(Ipv4Addr::new(
                    octets[12], octets[13], octets[14], octets[15],
                ));
            }
            ip
        }
        IpAddr::V4(_) => ip,
    }
}

/// Why the proxy never connects to `ip` (None: it may). Private ranges pass
/// only when `named` (a rule names this exact address); `local` are the
/// host's own addresses, treated as private.
pub fn refusal(ip: IpAddr, named: bool, local: &[IpAddr]) -> Option<&'static str> {
    let ip = canonical(ip);
    let never = match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            if v4.is_loopback() {
                Some("a loopback address")
            } else if a == 0 {
                Some("an unspecified address")
            } else if v4.is_link_local() {
                Some("a link-local address (the cloud metadata service among them)")
            } else if v4.is_multicast() {
                Some("a multicast address")
            } else if a >= 240 {
                Some("a broadcast or reserved address")
            } else if a == 192 && b == 0 && v4.octets()[2] == 0 {
                Some("a protocol-assignment address")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            if v6.is_loopback() {
                Some("a loopback address")
            } else if v6.is_unspecified() {
                Some("an unspecified address")
            } else if first & 0xffc0 == 0xfe80 {
                Some("a link-local address")
            } else if v6.is_multicast() {
                Some("a multicast address")
            } else {
                None
            }
        }
    };
    if never.is_some() {
        return never;
    }
    if named {
        return None;
    }
    let private = match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_private()
                || (a == 100 && (64..128).contains(&b))
                || (a == 198 && (b == 18 || b == 19))
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            first & 0xfe00 == 0xfc00 || first & 0xffc0 == 0xfec0
        }
    };
    if private {
        Some("a private address (a rule must name it exactly)")
    } else if local.contains(&ip) {
        Some("an address of the host itself (a rule must name it exactly)")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> EgressRule {
        EgressRule::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn dest(text: &str) -> Destination {
        Destination::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn rules_match_names_domains_and_addresses_on_their_port() {
        let github = rule("GitHub.com.:443");
        assert_eq!(github.to_string(), "github.com:443");
        assert!(github.allows(&dest("github.com:443")));
        assert!(github.allows(&dest("GITHUB.COM:443")));
        assert!(!github.allows(&dest("github.com:22")));
        assert!(!github.allows(&dest("api.github.com:443")));

        let npm = rule("*.npmjs.org:443");
        assert!(npm.allows(&dest("registry.npmjs.org:443")));
        assert!(npm.allows(&dest("a.b.npmjs.org:443")));
        assert!(!npm.allows(&dest("npmjs.org:443")));
        assert!(!npm.allows(&dest("evilnpmjs.org:443")));

        let ip = rule("10.200.0.2:8080");
        assert!(ip.allows(&dest("10.200.0.2:8080")));
        assert!(ip.names_address("10.200.0.2".parse().expect("ip")));
        assert!(!ip.allows(&dest("10.200.0.3:8080")));
        let v6 = rule("[2001:db8::1]:443");
        assert_eq!(v6.to_string(), "[2001:db8::1]:443");
        assert!(v6.allows(&dest("[2001:db8:0::1]:443")));
    }

    #[test]
    fn bad_rules_say_what_is_wrong() {
        for (text, says) in [
            ("github.com", "no port"),
            ("github.com:0", "1 to 65535"),
            ("github.com:https", "1 to 65535"),
            (":443", "no host"),
            ("*:443", "not a host name"),
            ("gith ub.com:443", "not a host name"),
            ("[::1:443", "closing"),
            ("2130706433:80", "dotted decimal"),
            ("0x7f.1:80", "dotted decimal"),
        ] {
            let err = EgressRule::parse(text).expect_err(text);
            assert!(err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn numeric_and_mapped_spellings_never_hide_an_address() {
        for text in [
            "0177.0.0.1:80",
            "2130706433:80",
            "127.1:80",
            "0x7f000001:80",
        ] {
            assert!(Destination::parse(text).is_err(), "{text}");
        }
        let mapped = dest("[::ffff:127.0.0.1]:80");
        assert_eq!(mapped.host, Host::Ip("127.0.0.1".parse().expect("ip")));
        let compatible = canonical("::169.254.169.254".parse().expect("ip"));
        assert_eq!(compatible, "169.254.169.254".parse::<IpAddr>().expect("ip"));
    }

    #[test]
    fn the_hosts_loopback_and_metadata_are_never_reached() {
        let local: Vec<IpAddr> = vec!["192.0.2.10".parse().expect("ip")];
        for never in [
            "127.0.0.1",
            "127.9.9.9",
            "::1",
            "0.0.0.0",
            "::",
            "169.254.169.254",
            "fe80::1",
            "224.0.0.1",
            "ff02::1",
            "255.255.255.255",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            let ip: IpAddr = never.parse().expect("ip");
            assert!(refusal(ip, true, &local).is_some(), "{never} named");
            assert!(refusal(ip, false, &local).is_some(), "{never}");
        }
        for private in [
            "10.0.0.1",
            "172.16.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "fd00::1",
            "192.0.2.10",
        ] {
            let ip: IpAddr = private.parse().expect("ip");
            assert!(refusal(ip, false, &local).is_some(), "{private}");
            assert!(refusal(ip, true, &local).is_none(), "{private} named");
        }
        for public in ["93.184.216.34", "2606:4700::1111"] {
            assert!(
                refusal(public.parse().expect("ip"), false, &local).is_none(),
                "{public}"
            );
        }
    }

    #[test]
    fn rules_travel_as_their_text() {
        let rules = vec![rule("github.com:443"), rule("*.npmjs.org:443")];
        let json = serde_json::to_string(&rules).expect("json");
        assert_eq!(json, r#"["github.com:443","*.npmjs.org:443"]"#);
        assert_eq!(
            serde_json::from_str::<Vec<EgressRule>>(&json).expect("parse"),
            rules
        );
        assert!(serde_json::from_str::<Vec<EgressRule>>(r#"["nope"]"#).is_err());
    }
}
