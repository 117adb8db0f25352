//! Which credentials a method takes.

use tonic::Status;

use crate::principal::Principal;
use crate::role::Role;

/// The credentials one method takes. Anything not listed is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// No credential needed (health, reflection).
    pub open: bool,
    /// An API key whose role includes this one.
    pub role: Option<Role>,
    /// A run token (an agent acting).
    pub run: bool,
}

impl Access {
    pub const OPEN: Access = Access {
        open: true,
        role: None,
        run: false,
    };

    /// A key whose role includes `role`.
    pub const fn role(role: Role) -> Self {
        Self {
            open: false,
            role: Some(role),
            run: false,
        }
    }

    /// A run token only.
    pub const fn run() -> Self {
        Self {
            open: false,
            role: None,
            run: true,
        }
    }

    /// A run token, or a key whose role includes `role`.
    pub const fn run_or(role: Role) -> Self {
        Self {
            open: false,
            role: Some(role),
            run: true,
        }
    }

    /// What the method needs, in words: "an API key with role operator or admin, or a run token".
    pub fn needs(&self) -> String {
        let key = self.role.map(|role| {
            let roles: Vec<&str> = Role::holders(role).iter().map(|r| r.as_str()).collect();
            let listed = match roles.split_last() {
                Some((last, [])) => (*last).to_owned(),
                Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
                None => String::new(),
            };
            format!("an API key with role {listed}")
        });
        match (key, self.run) {
            (Some(key), true) => format!("{key}, or a run token"),
            (Some(key), false) => key,
            (None, true) => "an agent's run token".to_owned(),
            (None, false) => "no credential".to_owned(),
        }
    }

    /// Ok when `principal` may call `method`; PERMISSION_DENIED saying what it needs.
    pub fn check(&self, method: &str, principal: &Principal) -> Result<(), Status> {
        let allowed = self.open
            || match principal {
                Principal::Key { role, .. } => {
                    self.role.is_some_and(|needed| role.includes(needed))
                }
                Principal::Run { .. } => self.run,
                Principal::Internal => true,
            };
        if allowed {
            return Ok(());
        }
        let hint = match principal {
            Principal::Run { .. } => {
                "; run tokens are taken only where an agent acts (AgentTools/CallTool, Orchestrator/Handoff, tool-exec)"
            }
            _ => "",
        };
        Err(Status::permission_denied(format!(
            "{method} needs {}; the caller presented {}{hint}",
            self.needs(),
            principal.describe()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(role: Role) -> Principal {
        Principal::Key {
            id: "0123456789abcdef".into(),
            name: "k".into(),
            role,
        }
    }

    #[test]
    fn roles_and_run_tokens_get_what_the_method_takes() {
        let run = Principal::Run {
            verified: chorus_run_token::VerifiedToken {
                grant: chorus_run_token::RunGrant {
                    run_id: "r".into(),
                    task_id: "t".into(),
                    agent: "a".into(),
                    tools: vec![],
                    root: "/w".into(),
                    egress: Vec::new(),
                    epoch: 0,
                },
                kid: "k".into(),
                expires_at: 1,
            },
            token: "t".into(),
        };
        let operator = Access::role(Role::Operator);
        assert_eq!(
            Access::run_or(Role::Viewer).needs(),
            "an API key with role viewer, operator or admin, or a run token"
        );
        assert!(operator.check("M", &key(Role::Admin)).is_ok());
        assert!(operator.check("M", &key(Role::Operator)).is_ok());
        let denied = operator
            .check("Orchestrator/StartTask", &key(Role::Viewer))
            .expect_err("refused");
        assert_eq!(denied.code(), tonic::Code::PermissionDenied);
        assert!(
            denied
                .message()
                .contains("needs an API key with role operator or admin"),
            "{}",
            denied.message()
        );
        let by_run = operator.check("M", &run).expect_err("refused");
        assert!(
            by_run.message().contains("run tokens are taken only"),
            "{}",
            by_run.message()
        );
        assert!(Access::run().check("M", &run).is_ok());
        assert!(Access::run().check("M", &key(Role::Admin)).is_err());
        assert!(Access::run_or(Role::Operator).check("M", &run).is_ok());
        assert!(
            Access::role(Role::ToolExec)
                .check("M", &key(Role::Admin))
                .is_err()
        );
        assert!(
            Access::role(Role::Viewer)
                .check("M", &key(Role::ToolExec))
                .is_err()
        );
    }
}
