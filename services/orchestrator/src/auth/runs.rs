//! Run tokens bound to their runs: minted from what the run holds, and checked,
//! claim by claim, against the stored run before anything is done for it.

use std::time::{Duration, UNIX_EPOCH};

use chorus_run_token::{RunGrant, VerifiedToken};
use tracing::warn;

use crate::domain::policy::Reporter;
use crate::domain::{DomainError, Run, RunId, TaskId, TokenBinding, now_ms};
use crate::error::ServiceError;
use crate::state::AppState;
use crate::store::StoreError;

/// The binding of a run that opens now: its token confines it to `root`,
/// carries the agent's `egress` list and expires after `ttl` (whole seconds,
/// as tokens carry them).
pub fn binding(root: &std::path::Path, egress: &[String], ttl: Duration) -> TokenBinding {
    let ttl = ttl.clamp(Duration::from_secs(1), chorus_run_token::MAX_TOKEN_TTL);
    let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    let expires_ms = now_ms().saturating_add(ttl_ms);
    TokenBinding {
        root: root.to_owned(),
        expires_ms: expires_ms - expires_ms.rem_euclid(1000),
        egress: egress.to_vec(),
    }
}

/// Mints the token of `run` from what the run holds.
///
/// # Errors
/// FAILED_PRECONDITION for a run opened without a token binding.
pub fn mint(state: &AppState, run: &Run) -> Result<String, ServiceError> {
    let binding = run.token.as_ref().ok_or_else(|| {
        ServiceError::Precondition(format!("run {} was opened without a token", run.id))
    })?;
    let grant = RunGrant {
        run_id: run.id.to_string(),
        task_id: run.task_id.to_string(),
        agent: run.agent.to_string(),
        tools: run.tools.clone(),
        root: binding.root.clone(),
        egress: binding.egress.clone(),
        epoch: u64::from(run.epoch),
    };
    let expires =
        UNIX_EPOCH + Duration::from_millis(u64::try_from(binding.expires_ms).unwrap_or(0));
    Ok(state.signer.mint_until(&grant, expires))
}

/// The run a verified token names, once every claim of the token is the
/// run's: task, agent, tools, workspace root, epoch and expiry. A mismatch is
/// refused (UNAUTHENTICATED) and logged; an unknown run, and a token of a
/// driver that has since lost the run, are "not active".
pub async fn run_of_token(state: &AppState, token: &VerifiedToken) -> Result<Run, ServiceError> {
    match run_and_reporter(state, token).await? {
        (run, Reporter::Driver) => Ok(run),
        (run, Reporter::LostDriver) => Err(DomainError::RunNotActive(format!(
            "run {} was taken over by another driver after this token was minted; the token no longer acts for it",
            run.id
        ))
        .into()),
    }
}

/// The run a verified token names and who holds the token: the run's driver
/// (every claim is the run's), or a driver that lost the run to a takeover
/// (every claim is the run's but the epoch, which is earlier, and the expiry)
/// — such a driver may still report how a call it started ended.
///
/// # Errors
/// As [`run_of_token`], but for the lost driver.
pub async fn run_and_reporter(
    state: &AppState,
    token: &VerifiedToken,
) -> Result<(Run, Reporter), ServiceError> {
    let (run_id, _) = ids_of(token)?;
    let run = match state.store.get_run(run_id).await {
        Ok(run) => run,
        Err(StoreError::NotFound { .. }) => {
            return Err(DomainError::RunNotActive(format!("run {run_id} is unknown")).into());
        }
        Err(e) => return Err(e.into()),
    };
    let by = reporter(&run, token)?;
    Ok((run, by))
}

/// Who holds `token` for `run`, read as [`run_and_reporter`] says; a token
/// whose claims are not the run's is refused ([`DomainError::NotItsToken`],
/// UNAUTHENTICATED) and logged.
pub fn reporter(run: &Run, token: &VerifiedToken) -> Result<Reporter, DomainError> {
    match standing(run, token) {
        Standing::Current => Ok(Reporter::Driver),
        Standing::Superseded => Ok(Reporter::LostDriver),
        Standing::Mismatch(claim) => {
            warn!(run_id = %run.id, claim, kid = %token.kid, "a run token whose claims are not its run's was refused");
            Err(DomainError::NotItsToken(format!(
                "run token refused: its {claim} is not run {}'s; it was not minted for this run",
                run.id
            )))
        }
    }
}

/// The run and task a verified token names, as ids; a token naming ids
/// that do not parse names no run there is ("not active", as an unknown run).
pub fn ids_of(token: &VerifiedToken) -> Result<(RunId, TaskId), DomainError> {
    let grant = &token.grant;
    let unknown = || DomainError::RunNotActive(format!("run {} is unknown", grant.run_id));
    let run = RunId::parse(&grant.run_id).map_err(|_| unknown())?;
    let task = TaskId::parse(&grant.task_id).map_err(|_| unknown())?;
    Ok((run, task))
}

/// How a verified token stands to the run it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Every claim is the run's.
    Current,
    /// Minted for the run's driver before a takeover: every claim but the
    /// epoch (earlier) and the expiry is the run's.
    Superseded,
    /// This claim is not the run's: the token was not minted for it.
    Mismatch(&'static str),
}

/// How `token` stands to `run`.
pub fn standing(run: &Run, token: &VerifiedToken) -> Standing {
    let grant = &token.grant;
    let Some(binding) = &run.token else {
        return Standing::Mismatch("run (the run was opened without a token)");
    };
    let sorted = |tools: &[String]| {
        let mut tools = tools.to_vec();
        tools.sort();
        tools
    };
    let claim = if grant.run_id != run.id.to_string() {
        Some("run")
    } else if grant.task_id != run.task_id.to_string() {
        Some("task")
    } else if grant.agent != run.agent.as_str() {
        Some("agent")
    } else if sorted(&grant.tools) != sorted(&run.tools) {
        Some("tool list")
    } else if grant.root != binding.root {
        Some("workspace root")
    } else if sorted(&grant.egress) != sorted(&binding.egress) {
        Some("egress list")
    } else {
        None
    };
    if let Some(claim) = claim {
        return Standing::Mismatch(claim);
    }
    match grant.epoch.cmp(&u64::from(run.epoch)) {
        std::cmp::Ordering::Less => Standing::Superseded,
        std::cmp::Ordering::Greater => Standing::Mismatch("epoch"),
        std::cmp::Ordering::Equal
            if i64::try_from(token.expires_at).ok()
                != Some(binding.expires_ms.div_euclid(1000)) =>
        {
            Standing::Mismatch("expiry")
        }
        std::cmp::Ordering::Equal => Standing::Current,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Name, RunState, TaskId, Usage};

    fn run() -> Run {
        Run {
            id: RunId::new(),
            task_id: TaskId::new(),
            agent: Name::parse("agent", "writer").expect("name"),
            parent: None,
            state: RunState::Active,
            tools: vec!["file.read".into(), "bash".into()],
            rules: Default::default(),
            started_ms: 0,
            finished_ms: None,
            end_reason: None,
            completion_report: None,
            planner_output: None,
            session_id: None,
            usage: Usage::default(),
            handoff_index: None,
            prompt: None,
            output: None,
            token: Some(TokenBinding {
                root: "/srv/ws".into(),
                expires_ms: 1_700_000_000_000,
                egress: vec!["github.com:443".into()],
            }),
            replica: None,
            epoch: 0,
            timeout_ms: None,
            lease_expires_ms: None,
        }
    }

    fn token_of(run: &Run) -> VerifiedToken {
        VerifiedToken {
            grant: RunGrant {
                run_id: run.id.to_string(),
                task_id: run.task_id.to_string(),
                agent: run.agent.to_string(),
                tools: vec!["bash".into(), "file.read".into()],
                root: "/srv/ws".into(),
                egress: vec!["github.com:443".into()],
                epoch: 0,
            },
            kid: "k".into(),
            expires_at: 1_700_000_000,
        }
    }

    #[test]
    fn a_token_minted_for_the_run_matches_in_any_tool_order() {
        let run = run();
        assert_eq!(standing(&run, &token_of(&run)), Standing::Current);
    }

    #[test]
    fn every_claim_that_is_not_the_runs_is_named() {
        let run = run();
        type Forge = fn(&mut VerifiedToken);
        let cases: [(&str, Forge); 8] = [
            ("task", |t| t.grant.task_id = TaskId::new().to_string()),
            ("agent", |t| t.grant.agent = "editor".into()),
            ("tool list", |t| t.grant.tools.push("git.push".into())),
            ("workspace root", |t| t.grant.root = "/".into()),
            ("expiry", |t| t.expires_at += 3600),
            ("epoch", |t| t.grant.epoch = 1),
            ("egress list", |t| {
                t.grant.egress.push("*.evil.example:443".into())
            }),
            ("egress list", |t| t.grant.egress.clear()),
        ];
        for (claim, forge) in cases {
            let mut token = token_of(&run);
            forge(&mut token);
            assert_eq!(standing(&run, &token), Standing::Mismatch(claim));
        }
        let mut unbound = run.clone();
        unbound.token = None;
        assert!(matches!(
            standing(&unbound, &token_of(&run)),
            Standing::Mismatch(_)
        ));
    }

    #[test]
    fn a_token_of_the_driver_before_a_takeover_is_superseded_after_it() {
        // The process of the replica that lost the run (partitioned, not
        // dead) still holds the old token; the run was resumed elsewhere.
        let mut run = run();
        let old = token_of(&run);
        let later = TokenBinding {
            root: "/srv/ws".into(),
            expires_ms: 1_700_000_100_000,
            egress: vec!["github.com:443".into()],
        };
        crate::domain::policy::resume_run(&mut run, "r2", later, "the replica stopped")
            .expect("resumed");
        assert_eq!(run.epoch, 1);
        // It no longer acts for the run (run_of_token refuses it), but may
        // still report how a call it started ended.
        assert_eq!(standing(&run, &old), Standing::Superseded);
        let mut current = old.clone();
        current.grant.epoch = 1;
        current.expires_at = 1_700_000_100;
        assert_eq!(standing(&run, &current), Standing::Current);
        // A token of the same epoch with another expiry, or of a later epoch,
        // was never minted for the run.
        let mut forged = current.clone();
        forged.expires_at += 1;
        assert_eq!(standing(&run, &forged), Standing::Mismatch("expiry"));
        forged = current.clone();
        forged.grant.epoch = 2;
        assert_eq!(standing(&run, &forged), Standing::Mismatch("epoch"));
        // A lost driver's token that is not the run's otherwise is refused.
        let mut other = old.clone();
        other.grant.tools.push("git.push".into());
        assert_eq!(standing(&run, &other), Standing::Mismatch("tool list"));
        // ... and the old driver's own writes are refused too.
        assert!(crate::domain::policy::check_driver(&run, "r1", 0).is_err());
        assert!(crate::domain::policy::check_driver(&run, "r2", 1).is_ok());
    }

    #[test]
    fn bindings_expire_on_whole_seconds_within_the_longest_lifetime() {
        let b = binding(
            std::path::Path::new("/w"),
            &[],
            Duration::from_secs(10 * 365 * 24 * 3600),
        );
        assert_eq!(b.expires_ms % 1000, 0);
        let longest = i64::try_from(chorus_run_token::MAX_TOKEN_TTL.as_millis()).expect("fits");
        assert!(b.expires_ms <= now_ms() + longest);
    }
}
