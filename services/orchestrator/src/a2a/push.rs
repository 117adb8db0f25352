//! Push notifications: each status change of a task with push configs is
//! sent to their webhooks as the A2A stream response its stream would
//! carry (JSON), with the client's A2A token and a signature keyed with the
//! config's own secret, until the webhook answers 2xx or
//! [`MAX_PUSH_ATTEMPTS`] attempts failed. Every replica delivers: a
//! notification is claimed before it is sent, so one replica sends it. The
//! addresses a webhook's host resolves to are checked when the config is
//! made and at each attempt, and the connection made to those addresses
//! only (no redirect is followed, no proxy used): a name cannot be pointed
//! at this machine or a metadata service after it was accepted.

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr as _;
use std::time::Duration;

use chorus_proto::a2a::v1 as pb;
use hmac::{Hmac, Mac as _};
use prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage};
use sha2::Sha256;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::convert;
use crate::domain::push::{MAX_PUSH_ATTEMPTS, PushNetworks, push_retry_ms};
use crate::domain::{EventKind, TaskStatus, now_ms};
use crate::state::AppState;
use crate::store::{EVENT_PAGE_BYTES, PushDelivery, StoreError};

/// The header carrying a notification's signature: `t=<ms>,v1=<hex>`, the
/// HMAC-SHA256 of `<ms>.<body>` keyed with the config's signing secret.
pub const SIGNATURE_HEADER: &str = "x-chorus-signature";
/// The header A2A clients read the config's token from.
const TOKEN_HEADER: &str = "x-a2a-notification-token";
/// The answer header that gives a new config's signing secret, once: to
/// whoever made the config (CreateTaskPushNotificationConfig, or a
/// SendMessage that carried one). It is never given again.
pub const SECRET_HEADER: &str = "chorus-push-secret";
/// How long a claimed notification is kept from other replicas.
const LEASE_MS: i64 = 60_000;
/// How long an attempt may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the outbox is looked at when it had nothing due.
const IDLE: Duration = Duration::from_millis(250);
/// Notifications claimed at once.
const BATCH: i64 = 16;

/// Delivers notifications until the shutdown.
pub fn spawn(state: AppState) -> JoinHandle<()> {
    tokio::spawn(async move {
        let pool = match DescriptorPool::decode(chorus_proto::FILE_DESCRIPTOR_SET) {
            Ok(pool) => pool,
            Err(e) => {
                warn!(error = %e, "no A2A push notifications: the descriptors do not decode");
                return;
            }
        };
        loop {
            let claimed = match state.store.claim_pushes(LEASE_MS, BATCH).await {
                Ok(claimed) => claimed,
                Err(e) => {
                    warn!(error = %e, "cannot read the push notification outbox");
                    Vec::new()
                }
            };
            if claimed.is_empty() {
                tokio::select! {
                    () = state.shutdown.cancelled() => return,
                    () = tokio::time::sleep(IDLE) => continue,
                }
            }
            // Side by side: a slow webhook does not hold the others back.
            let mut sends = tokio::task::JoinSet::new();
            for delivery in claimed {
                let (state, pool) = (state.clone(), pool.clone());
                sends.spawn(async move { deliver(&state, &pool, delivery).await });
            }
            tokio::select! {
                () = state.shutdown.cancelled() => return,
                _ = sends.join_all() => {}
            }
        }
    })
}

/// One attempt at one notification, and what it leaves in the outbox.
async fn deliver(state: &AppState, pool: &DescriptorPool, delivery: PushDelivery) {
    let id = delivery.outbox_id;
    let attempt = delivery.attempts + 1;
    let result = attempt_once(state, pool, &delivery).await;
    let recorded = match result {
        Ok(()) => {
            info!(config = %delivery.config.id, task_id = %delivery.config.task_id, sequence = delivery.sequence, "push notification delivered");
            state.store.push_done(id).await
        }
        Err(Attempt::Gone) => state.store.push_done(id).await,
        Err(Attempt::Failed(why)) if attempt >= MAX_PUSH_ATTEMPTS => {
            warn!(config = %delivery.config.id, task_id = %delivery.config.task_id, attempts = attempt, error = %why, "push notification dropped after its last attempt");
            state.store.push_done(id).await
        }
        Err(Attempt::Failed(why)) => {
            warn!(config = %delivery.config.id, attempt, error = %why, "push notification failed; it is tried again");
            let due = now_ms() + push_retry_ms(attempt);
            state.store.push_failed(id, attempt, due, why).await
        }
    };
    if let Err(e) = recorded {
        warn!(error = %e, "cannot record a push notification's attempt");
    }
}

enum Attempt {
    /// The task or its event is gone: nothing to send.
    Gone,
    Failed(String),
}

impl From<StoreError> for Attempt {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound { .. } => Self::Gone,
            e => Self::Failed(e.to_string()),
        }
    }
}

async fn attempt_once(
    state: &AppState,
    pool: &DescriptorPool,
    delivery: &PushDelivery,
) -> Result<(), Attempt> {
    let config = &delivery.config;
    let task = state.store.get_task(config.task_id).await?;
    let event = state
        .store
        .events(
            task.id,
            delivery.sequence.saturating_sub(1),
            1,
            EVENT_PAGE_BYTES,
        )
        .await?
        .into_iter()
        .next()
        .ok_or(Attempt::Gone)?;
    let to = event.data["to"]
        .as_str()
        .and_then(|s| TaskStatus::from_str(s).ok())
        .unwrap_or(task.status);
    // The state the event left the task in, whatever came after (its data
    // says what the call is: tool, arguments, rule, approval id).
    let a2a_state = match event.kind {
        EventKind::ApprovalRequested => pb::TaskState::InputRequired,
        EventKind::ApprovalAnswered => pb::TaskState::Working,
        _ => convert::state_of(to, task.auto_start.is_some(), task.never_started()),
    };
    let response = convert::status_update(&task, &event, a2a_state);
    let body = json_of(pool, &response).map_err(Attempt::Failed)?;
    let addrs = reachable(&state.push_networks, &config.url)
        .await
        .map_err(Attempt::Failed)?;
    let host = config.url.host_str().unwrap_or_default().to_owned();
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(ATTEMPT_TIMEOUT)
        .resolve_to_addrs(&host, &addrs)
        .build()
        .map_err(|e| Attempt::Failed(e.to_string()))?;
    let at = now_ms();
    let mut request = client
        .post(config.url.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/json");
    if !config.token.is_empty() {
        request = request.header(TOKEN_HEADER, &config.token);
    }
    if let Some(secret) = &config.secret {
        request = request.header(SIGNATURE_HEADER, signature(secret, at, &body));
    }
    if let Some(auth) = &config.authentication {
        request = request.header(
            reqwest::header::AUTHORIZATION,
            format!("{} {}", auth.scheme, auth.credentials),
        );
    }
    let answer = request
        .body(body)
        .send()
        .await
        .map_err(|e| Attempt::Failed(format!("{}: {e}", config.url)))?;
    if answer.status().is_success() {
        Ok(())
    } else {
        Err(Attempt::Failed(format!(
            "{} answered {}",
            config.url,
            answer.status()
        )))
    }
}

/// The addresses `url`'s host resolves to now, every one allowed and none
/// this machine's; else why not.
pub async fn reachable(networks: &PushNetworks, url: &url::Url) -> Result<Vec<SocketAddr>, String> {
    let host = url.host_str().ok_or("no host")?;
    let port = url.port_or_known_default().ok_or("no port")?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("{host} does not resolve: {e}"))?
        .collect();
    if addrs.is_empty() {
        return Err(format!("{host} resolves to no address"));
    }
    let own = own_addresses()?;
    for addr in &addrs {
        if let Some(why) = networks.refusal(addr.ip(), &own) {
            return Err(format!("{host}: {why}"));
        }
    }
    Ok(addrs)
}

/// Every address this machine's interfaces have now (in a container, the
/// container's: the host's own are not reachable as "this machine" there).
fn own_addresses() -> Result<Vec<IpAddr>, String> {
    let interfaces = nix::ifaddrs::getifaddrs()
        .map_err(|e| format!("cannot list this machine's addresses: {e}"))?;
    Ok(interfaces
        .filter_map(|i| i.address)
        .filter_map(|a| {
            a.as_sockaddr_in()
                .map(|v4| IpAddr::V4(v4.ip()))
                .or_else(|| a.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
        })
        .collect())
}

/// A new config's signing secret: 32 random bytes, hex.
pub fn new_secret() -> String {
    use chacha20poly1305::aead::OsRng;
    use chacha20poly1305::aead::rand_core::RngCore as _;
    let mut bytes = [0_u8; 32];
    OsRng.fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `t=<ms>,v1=<hex of HMAC-SHA256(secret, "<ms>.<body>")>`.
pub fn signature(secret: &str, at_ms: i64, body: &str) -> String {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
        return String::new();
    };
    mac.update(format!("{at_ms}.").as_bytes());
    mac.update(body.as_bytes());
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("t={at_ms},v1={hex}")
}

/// A stream response as A2A's JSON (proto3 JSON, camelCase).
fn json_of(pool: &DescriptorPool, response: &pb::StreamResponse) -> Result<String, String> {
    let descriptor = pool
        .get_message_by_name("lf.a2a.v1.StreamResponse")
        .ok_or("no StreamResponse in the descriptors")?;
    let message = DynamicMessage::decode(descriptor, response.encode_to_vec().as_slice())
        .map_err(|e| e.to_string())?;
    serde_json::to_string(&message).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_is_the_hmac_of_the_time_and_the_body() {
        // HMAC-SHA256("key", "1.body"), computed apart.
        assert_eq!(
            signature("key", 1, "body"),
            "t=1,v1=91b5374b153842ad05b2c4eab9349b8321b14703165bd3fb8b034dfb8be98ae5"
        );
    }

    #[tokio::test]
    async fn this_machines_own_interface_addresses_are_never_reached() {
        let all = PushNetworks::parse(&["0.0.0.0/0".to_owned(), "::/0".to_owned()]).expect("parse");
        let own = own_addresses().expect("getifaddrs");
        assert!(!own.is_empty(), "this machine has no address at all");
        for ip in own {
            let host = match ip {
                IpAddr::V4(v4) => v4.to_string(),
                IpAddr::V6(v6) => format!("[{v6}]"),
            };
            let url = url::Url::parse(&format!("http://{host}:9/hook")).expect("url");
            let why = reachable(&all, &url).await.expect_err(&host);
            assert!(
                why.contains("this machine") || why.contains("link-local"),
                "{host}: {why}"
            );
        }
    }

    #[test]
    fn secrets_are_new_each_time() {
        let (a, b) = (new_secret(), new_secret());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
    }
}
