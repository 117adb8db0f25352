//! Named tool sets that agents reference as `@name` in their allow-lists.

/// A named set of tools.
#[derive(Debug, Clone, Copy)]
pub struct Profile {
    pub name: &'static str,
    pub tools: &'static [&'static str],
}

const READ_ONLY_FILES: [&str; 3] = ["file.read", "file.list", "file.search"];

/// researcher, developer, reviewer.
pub static PROFILES: &[Profile] = &[
    Profile {
        name: "researcher",
        tools: &[
            READ_ONLY_FILES[0],
            READ_ONLY_FILES[1],
            READ_ONLY_FILES[2],
            "bash",
            "git.status",
            "git.diff",
            "task.get",
            "task.comment",
        ],
    },
    Profile {
        name: "developer",
        tools: &[
            "file.read",
            "file.create",
            "file.write",
            "file.patch",
            "file.delete",
            "file.list",
            "file.search",
            "bash",
            "git.status",
            "git.diff",
            "git.commit",
            "git.push",
            "task.get",
            "task.list",
            "task.update_stage",
            "task.comment",
        ],
    },
    Profile {
        name: "reviewer",
        tools: &[
            READ_ONLY_FILES[0],
            READ_ONLY_FILES[1],
            READ_ONLY_FILES[2],
            "bash",
            "git.status",
            "git.diff",
            "task.get",
            "task.update_stage",
            "task.comment",
        ],
    },
];

/// Looks a profile up by name (without the `@`).
pub fn get(name: &str) -> Option<&'static Profile> {
    PROFILES.iter().find(|p| p.name == name)
}
