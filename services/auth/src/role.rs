//! Roles of API keys.

use std::fmt;
use std::str::FromStr;

/// What an API key may do. `Admin` ⊇ `Operator` ⊇ `Viewer`; `ToolExec` is the
/// tool-exec service's own and includes nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Workspaces, providers, agents, runs, keys; and all an operator may do.
    Admin,
    /// Tasks: create, plan, answer, start, cancel, hand off; and all a viewer may do.
    Operator,
    /// Read and watch.
    Viewer,
    /// tool-exec asking about runs and recording their tool calls.
    ToolExec,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Admin, Role::Operator, Role::Viewer, Role::ToolExec];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Operator => "operator",
            Role::Viewer => "viewer",
            Role::ToolExec => "tool-exec",
        }
    }

    /// True when a key of this role may do what `needed` may.
    pub fn includes(self, needed: Role) -> bool {
        match self {
            Role::Admin => needed != Role::ToolExec,
            Role::Operator => matches!(needed, Role::Operator | Role::Viewer),
            Role::Viewer => needed == Role::Viewer,
            Role::ToolExec => needed == Role::ToolExec,
        }
    }

    /// The roles that include `needed`, most limited first ("operator or admin").
    pub fn holders(needed: Role) -> Vec<Role> {
        [Role::Viewer, Role::Operator, Role::Admin, Role::ToolExec]
            .into_iter()
            .filter(|r| r.includes(needed))
            .collect()
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| {
                format!("unknown role '{s}'; roles are admin, operator, viewer, tool-exec")
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_include_the_ones_below_them_and_tool_exec_is_apart() {
        assert!(Role::Admin.includes(Role::Operator) && Role::Admin.includes(Role::Viewer));
        assert!(Role::Operator.includes(Role::Viewer) && !Role::Operator.includes(Role::Admin));
        assert!(!Role::Viewer.includes(Role::Operator));
        assert!(!Role::Admin.includes(Role::ToolExec) && !Role::ToolExec.includes(Role::Viewer));
        assert_eq!(Role::holders(Role::Operator), [Role::Operator, Role::Admin]);
    }

    #[test]
    fn roles_read_back_from_their_names() {
        for role in Role::ALL {
            assert_eq!(role.as_str().parse::<Role>(), Ok(role));
        }
        assert!(
            "root"
                .parse::<Role>()
                .expect_err("refused")
                .contains("admin, operator")
        );
    }
}
