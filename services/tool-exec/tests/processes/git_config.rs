//! A repository's configuration never runs or reaches anything through the git
//! tools, however it is written: every way an attacker found or could think
//! of, each planted the way an agent with bash (or only file tools, through a
//! work-tree file the configuration includes) would plant it, then every git
//! tool called by a run that holds the `network` grant. Each program, if run,
//! would create `<name>-ran` in the workspace.

use std::path::Path;

use serde_json::json;

use crate::common::{Harness, git, init_repo};

/// A repository with one commit.
async fn repo() -> Harness {
    let h = Harness::new().await;
    init_repo(&h.root);
    h.write("a.txt", "alpha\n");
    git(&h.root, &["add", "."]);
    git(&h.root, &["commit", "-q", "-m", "first"]);
    h
}

/// A shell command that leaves `<what>-ran` in `root`.
fn ran(root: &Path, what: &str) -> String {
    format!("sh -c 'touch {}/{what}-ran' #", root.display())
}

/// The same, as an `ext::` remote URL (spaces are `% `).
fn ext_url(root: &Path, what: &str) -> String {
    format!("ext::sh -c touch% {}/{what}-ran", root.display())
}

/// Appends raw text to the repository's configuration (as bash would).
fn append_config(h: &Harness, text: &str) {
    let config = h.root.join(".git/config");
    let mut old = std::fs::read_to_string(&config).expect("config");
    old.push_str(text);
    std::fs::write(&config, old).expect("config");
}

/// Every git tool, by a run with the network grant. status, diff and commit
/// still work (what a planted configuration adds is hidden, not fatal);
/// pushes go nowhere here, so only that nothing ran matters for them.
/// Returns the local tools that failed.
async fn call_every_git_tool(h: &Harness) -> Vec<String> {
    h.write("a.txt", "changed\n");
    let mut failed = Vec::new();
    for (tool, args) in [
        ("git.status", json!({})),
        ("git.diff", json!({})),
        ("git.diff", json!({"staged": true})),
        ("git.commit", json!({"message": "m", "all": true})),
    ] {
        if let Err(e) = h.call_with_network(tool, args).await {
            failed.push(format!("{tool}: {e}"));
        }
    }
    for remote in ["origin", "other"] {
        let _ = h
            .call_with_network("git.push", json!({ "remote": remote }))
            .await;
    }
    failed
}

fn what_ran(h: &Harness) -> Vec<String> {
    let mut ran: Vec<String> = std::fs::read_dir(&h.root)
        .expect("read root")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with("-ran"))
        .collect();
    ran.sort();
    ran
}

/// One way in: its name, what it appends to `.git/config`, and the files it
/// plants in the work tree or `.git` (path, content).
type Case = (&'static str, String, Vec<(&'static str, String)>);

fn cases(root: &Path) -> Vec<Case> {
    let r = |what| ran(root, what);
    vec![
        // Found: a protocol allowed by the repository beats protocol.allow=never
        // on the command line.
        (
            "protocol.ext.allow",
            format!(
                "[protocol \"ext\"]\n\tallow = always\n[remote \"origin\"]\n\turl = {}\n",
                ext_url(root, "ext-allow")
            ),
            vec![],
        ),
        // The file transport runs receive-pack locally: whatever the remote's
        // receivepack names.
        (
            "protocol.file.allow with receivepack",
            format!(
                "[protocol \"file\"]\n\tallow = always\n[remote \"other\"]\n\turl = file://{}/.git\n\treceivepack = {}\n",
                root.display(),
                r("receivepack")
            ),
            vec![],
        ),
        // Found: a filter whose name holds '=' escapes `-c filter.<name>.clean=`.
        (
            "filter name with =",
            format!(
                "[filter \"a=b\"]\n\tclean = {}\n\tsmudge = {}\n",
                r("filter-eq-clean"),
                r("filter-eq-smudge")
            ),
            vec![(".gitattributes", "* filter=a=b\n".to_owned())],
        ),
        // Found: a work-tree file included by the configuration, which an
        // agent with file tools alone can change.
        (
            "include.path to a work-tree file",
            "[include]\n\tpath = ../included.cfg\n".to_owned(),
            vec![
                (
                    "included.cfg",
                    format!(
                        "[filter \"inc\"]\n\tclean = {}\n[core]\n\tfsmonitor = {}\n",
                        r("include-clean"),
                        r("include-fsmonitor")
                    ),
                ),
                (".gitattributes", "* filter=inc\n".to_owned()),
            ],
        ),
        (
            "includeIf gitdir",
            "[includeIf \"gitdir:/\"]\n\tpath = ../conditional.cfg\n".to_owned(),
            vec![
                (
                    "conditional.cfg",
                    format!("[filter \"cond\"]\n\tclean = {}\n", r("includeif-clean")),
                ),
                (".gitattributes", "* filter=cond\n".to_owned()),
            ],
        ),
        (
            "filter name with dots and =",
            format!(
                "[filter \"x.y=z\"]\n\tclean = {}\n\tprocess = {}\n",
                r("dotted-clean"),
                r("dotted-process")
            ),
            vec![(".gitattributes", "* filter=x.y=z\n".to_owned())],
        ),
        (
            "diff textconv with = in its name",
            format!(
                "[diff \"t=u\"]\n\ttextconv = {}\n\tcommand = {}\n",
                r("textconv-eq"),
                r("diffcommand-eq")
            ),
            vec![(".gitattributes", "* diff=t=u\n".to_owned())],
        ),
        // `.git/commondir` makes git read the configuration of another
        // directory (a linked worktree's common directory).
        (
            "commondir to the work tree",
            String::new(),
            vec![
                (".git/commondir", "../common\n".to_owned()),
                (
                    "common/config",
                    format!(
                        "[core]\n\trepositoryformatversion = 0\n\tfsmonitor = {}\n[filter \"common\"]\n\tclean = {}\n",
                        r("commondir-fsmonitor"),
                        r("commondir-clean")
                    ),
                ),
                (".gitattributes", "* filter=common\n".to_owned()),
            ],
        ),
        // worktreeConfig reads `.git/config.worktree` too.
        (
            "extensions.worktreeConfig",
            "[core]\n\trepositoryformatversion = 1\n[extensions]\n\tworktreeConfig = true\n"
                .to_owned(),
            vec![
                (
                    ".git/config.worktree",
                    format!("[filter \"wt\"]\n\tclean = {}\n", r("worktree-clean")),
                ),
                (".gitattributes", "* filter=wt\n".to_owned()),
            ],
        ),
        // An attributes file named by the configuration, in the work tree.
        (
            "core.attributesFile",
            format!(
                "[core]\n\tattributesFile = {}/attrs\n[filter \"af\"]\n\tclean = {}\n",
                root.display(),
                r("attributesfile-clean")
            ),
            vec![("attrs", "* filter=af\n".to_owned())],
        ),
        // An https remote rewritten into ext:: by insteadOf, with ext allowed.
        (
            "insteadOf into an allowed ext",
            format!(
                "[protocol \"ext\"]\n\tallow = always\n[url \"{}\"]\n\tinsteadOf = https://example.invalid/\n[remote \"origin\"]\n\turl = https://example.invalid/repo.git\n",
                ext_url(root, "insteadof")
            ),
            vec![],
        ),
        // Hooks from the work tree, config-defined hooks and a hooksPath.
        (
            "hooksPath and config hooks",
            format!(
                "[core]\n\thooksPath = {}/hooks\n[hook \"h\"]\n\tcommand = {}\n\tevent = pre-commit\n",
                root.display(),
                r("confighook")
            ),
            vec![(
                "hooks/pre-commit",
                format!("#!/bin/sh\ntouch {}/hookspath-ran\n", root.display()),
            )],
        ),
        // Signing with a program of the repository's choosing.
        (
            "ssh signing program",
            format!(
                "[commit]\n\tgpgSign = true\n[gpg]\n\tformat = ssh\n[gpg \"ssh\"]\n\tprogram = {}\n[user]\n\tsigningKey = key\n",
                r("gpg-ssh")
            ),
            vec![],
        ),
        // The ssh transport's command, scoped to one URL.
        (
            "core.sshCommand with an ssh remote",
            format!(
                "[core]\n\tsshCommand = {}\n[protocol \"ssh\"]\n\tallow = always\n[remote \"other\"]\n\turl = ssh://example.invalid/repo.git\n\tuploadpack = {}\n",
                r("sshcommand"),
                r("uploadpack")
            ),
            vec![],
        ),
    ]
}

#[tokio::test]
async fn no_configuration_runs_a_program_through_the_git_tools() {
    let mut escaped = Vec::new();
    let mut broken = Vec::new();
    let probe = repo().await;
    let count = cases(&probe.root).len();
    drop(probe);
    for index in 0..count {
        let h = repo().await;
        let (name, config, files) = cases(&h.root).swap_remove(index);
        append_config(&h, &config);
        for (path, content) in files {
            h.write(path, &content);
        }
        let failed = call_every_git_tool(&h).await;
        if !failed.is_empty() {
            broken.push(format!("{name}: {failed:?}"));
        }
        let ran = what_ran(&h);
        if !ran.is_empty() {
            escaped.push(format!("{name}: {ran:?}"));
        }
    }
    assert!(
        escaped.is_empty(),
        "programs named by a repository's configuration ran:\n{}",
        escaped.join("\n")
    );
    assert!(
        broken.is_empty(),
        "git tools stopped working on a repository with a planted configuration:\n{}",
        broken.join("\n")
    );
}

/// The tools still work on an ordinary repository with a remote, branches,
/// an identity and a non-default object-format-free core section: what git
/// needs of the configuration is kept.
#[tokio::test]
async fn what_git_needs_of_the_configuration_is_kept() {
    let h = repo().await;
    append_config(
        &h,
        "[user]\n\tname = Kept Name\n\temail = kept@example.com\n[remote \"up stream\"]\n\turl = https://example.invalid/x.git\n\tfetch = +refs/heads/*:refs/remotes/up stream/*\n[branch \"main\"]\n\tremote = up stream\n\tmerge = refs/heads/main\n",
    );
    h.write("a.txt", "changed\n");
    let commit = h
        .call("git.commit", json!({"message": "kept", "all": true}))
        .await
        .expect("commit");
    assert!(commit.output["commit"].is_string(), "{commit:?}");
    assert_eq!(
        git(&h.root, &["log", "-1", "--format=%an <%ae>"]).trim(),
        "Kept Name <kept@example.com>",
        "the repository's identity is used"
    );
    // The configuration itself is unchanged by the tools.
    let config = std::fs::read_to_string(h.root.join(".git/config")).expect("config");
    assert!(config.contains("[remote \"up stream\"]"), "{config}");
}

/// G37: another run renames a hostile `.git/config` over the repository's,
/// again and again, while a run without bash calls git.status. Whatever git
/// is shown in place of `.git/config` (once a bind mount, which a rename
/// from another mount namespace detaches) must not be something an agent
/// can swap between the check and git's read: no call runs the filter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_renamed_in_while_git_runs_is_never_read() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let h = repo().await;
    h.write(".gitattributes", "* filter=evil\n");
    git(&h.root, &["add", "."]);
    git(&h.root, &["commit", "-q", "-m", "attributes"]);
    let config = h.root.join(".git/config");
    let benign = std::fs::read_to_string(&config).expect("config");
    let hostile = format!(
        "{benign}[filter \"evil\"]\n\tclean = {}\n\tprocess = {}\n",
        ran(&h.root, "race-clean"),
        ran(&h.root, "race-process")
    );
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, dir) = (stop.clone(), h.root.join(".git"));
        std::thread::spawn(move || {
            let mut swaps = 0_u64;
            while !stop.load(Ordering::Relaxed) {
                for (name, text) in [("config.hostile", &hostile), ("config.benign", &benign)] {
                    let staged = dir.join(name);
                    std::fs::write(&staged, text).expect("stage a config");
                    std::fs::rename(&staged, dir.join("config")).expect("rename over");
                }
                swaps += 1;
            }
            swaps
        })
    };
    let mut calls = 0;
    for i in 0..40 {
        // Same size, new time: git compares the content, through the filter.
        // (Written in place: the file keeps its owner.)
        std::fs::write(
            h.root.join("a.txt"),
            if i % 2 == 0 { "alpha-1\n" } else { "alpha-2\n" },
        )
        .expect("a.txt");
        if h.call("git.status", json!({})).await.is_ok() {
            calls += 1;
        }
        if !what_ran(&h).is_empty() {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().expect("the swapper");
    assert!(
        what_ran(&h).is_empty(),
        "git ran the filter of a configuration renamed in during a call ({calls} calls, {swaps} swaps): {:?}",
        what_ran(&h)
    );
    assert!(
        calls >= 20,
        "git.status failed while the configuration was swapped: {calls} of 40 calls ran"
    );
    assert!(swaps > 0);
}
