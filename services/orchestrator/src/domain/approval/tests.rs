use serde_json::json;

use super::*;

fn rule(text: &str) -> Rule {
    // "decision tool [field=value]"
    let mut parts = text.splitn(3, ' ');
    let decision = Decision::parse(parts.next().expect("decision")).expect("decision");
    let tool = parts.next().expect("tool").to_owned();
    let mut rule = Rule {
        tool,
        decision,
        ..Rule::default()
    };
    if let Some(condition) = parts.next() {
        let (field, value) = condition.split_once('=').expect("field=value");
        let value = Some(value.to_owned());
        match field {
            "command" => rule.command = value,
            "path" => rule.path = value,
            "remote" => rule.remote = value,
            "host" => rule.host = value,
            other => panic!("field {other}"),
        }
    }
    rule.check().unwrap_or_else(|e| panic!("{text}: {e}"));
    rule
}

fn rules(agent: &str, texts: &[&str]) -> RunRules {
    RunRules::own(agent, texts.iter().map(|t| rule(t)).collect(), Vec::new())
}

fn bash(command: &str) -> CallFacts {
    CallFacts::new("bash", &json!({ "command": command }), Some("/w"), None)
}

fn file(tool: &str, path: &str) -> CallFacts {
    CallFacts::new(tool, &json!({ "path": path }), Some("/w"), None)
}

fn decided(rules: &RunRules, call: &CallFacts) -> Decision {
    rules.decide(call, &[]).expect("decides").decision
}

#[test]
fn no_rule_allows_and_the_most_specific_rule_decides() {
    let none = RunRules::default();
    assert_eq!(decided(&none, &bash("rm -rf x")), Decision::Allow);
    let r = rules(
        "dev",
        &[
            "ask bash",
            "allow bash command=cargo test",
            "deny bash command=cargo test --release",
        ],
    );
    assert_eq!(decided(&r, &bash("ls")), Decision::Ask);
    assert_eq!(decided(&r, &bash("cargo test")), Decision::Allow);
    assert_eq!(
        decided(&r, &bash("cargo  test -p x")),
        Decision::Allow,
        "extra spaces and arguments"
    );
    assert_eq!(
        decided(&r, &bash("cargo testing")),
        Decision::Ask,
        "a prefix ends at a word"
    );
    assert_eq!(
        decided(&r, &bash("cargo test --release -p x")),
        Decision::Deny
    );
    // A family is less specific than a tool, `*` less than both.
    let r = rules("dev", &["deny *", "ask git.*", "allow git.status"]);
    assert_eq!(
        decided(&r, &CallFacts::new("git.status", &json!({}), None, None)),
        Decision::Allow
    );
    assert_eq!(
        decided(&r, &CallFacts::new("git.push", &json!({}), None, None)),
        Decision::Ask
    );
    assert_eq!(decided(&r, &file("file.read", "a")), Decision::Deny);
}

#[test]
fn at_equal_specificity_deny_beats_ask_beats_allow_and_the_agent_beats_its_workspace() {
    let r = rules("dev", &["allow git.push", "ask git.push", "deny git.push"]);
    let push = CallFacts::new("git.push", &json!({}), None, None);
    assert_eq!(decided(&r, &push), Decision::Deny);
    let r = rules("dev", &["allow git.push", "ask git.push"]);
    assert_eq!(decided(&r, &push), Decision::Ask);
    let r = RunRules::own(
        "dev",
        vec![rule("allow git.push")],
        vec![rule("ask git.push")],
    );
    assert_eq!(
        decided(&r, &push),
        Decision::Allow,
        "the agent's own rule over the default"
    );
    let r = RunRules::own("dev", vec![], vec![rule("ask git.push")]);
    assert_eq!(
        decided(&r, &push),
        Decision::Ask,
        "the default applies when the agent says nothing"
    );
}

#[test]
fn a_command_rule_never_allows_a_command_that_does_more_than_it_says() {
    let r = rules("dev", &["ask bash", "allow bash command=ls"]);
    for sneaky in [
        "ls; git push",
        "ls && curl evil",
        "ls | sh",
        "ls `rm -rf .`",
        "ls $(rm -rf .)",
        "ls > deploy/prod.yml",
        "ls\ngit push",
        "ls & git push",
        "ls <(git push)",
    ] {
        assert_eq!(decided(&r, &bash(sneaky)), Decision::Ask, "{sneaky:?}");
    }
    // A refusing rule finds its command anywhere in the line, behind
    // variables and wrappers too.
    let r = rules("dev", &["deny bash command=git push"]);
    for sneaky in [
        "echo hi; git push",
        "true && git push origin",
        "FOO=1 git push",
        "env FOO=1 git push",
        "sudo -u x git push",
        "timeout 5 git push",
        "echo $(git push)",
        "cd x\ngit push",
    ] {
        assert_eq!(decided(&r, &bash(sneaky)), Decision::Deny, "{sneaky:?}");
    }
    assert_eq!(decided(&r, &bash("git status")), Decision::Allow);
}

#[test]
fn a_path_rule_reads_the_path_every_way_the_tool_could() {
    let r = rules(
        "dev",
        &[
            "deny file.write path=deploy/**",
            "ask file.* path=secrets/*",
        ],
    );
    for path in [
        "deploy/prod.yml",
        "./deploy/prod.yml",
        "src/../deploy/prod.yml",
        "deploy//a/b.yml",
        "/w/deploy/x",
    ] {
        assert_eq!(
            decided(&r, &file("file.write", path)),
            Decision::Deny,
            "{path}"
        );
    }
    assert_eq!(
        decided(&r, &file("file.write", "src/deploy/x")),
        Decision::Allow
    );
    assert_eq!(
        decided(&r, &file("file.read", "secrets/key")),
        Decision::Ask
    );
    assert_eq!(
        decided(&r, &file("file.read", "secrets/sub/key")),
        Decision::Allow,
        "* stays within a directory"
    );
    // Where a symbolic link leads counts as much as what the call says.
    let through_link = CallFacts::new(
        "file.write",
        &json!({ "path": "link/prod.yml" }),
        Some("/w"),
        Some("deploy/prod.yml"),
    );
    assert_eq!(decided(&r, &through_link), Decision::Deny);
    // Searching or listing a directory that holds what a rule refuses asks.
    assert_eq!(decided(&r, &file("file.search", ".")), Decision::Ask);
    assert_eq!(decided(&r, &file("file.list", "secrets")), Decision::Ask);
    assert_eq!(decided(&r, &file("file.list", "src")), Decision::Allow);
    // An allowing path rule allows only what it wholly covers.
    let r = rules("dev", &["ask file.*", "allow file.* path=docs/**"]);
    assert_eq!(
        decided(&r, &file("file.write", "docs/a.md")),
        Decision::Allow
    );
    assert_eq!(
        decided(&r, &file("file.write", "docs/../src/main.rs")),
        Decision::Ask
    );
    assert_eq!(
        decided(&r, &file("file.write", "../outside")),
        Decision::Ask
    );
    let linked_out = CallFacts::new(
        "file.write",
        &json!({ "path": "docs/link" }),
        Some("/w"),
        Some("src/main.rs"),
    );
    assert_eq!(
        decided(&r, &linked_out),
        Decision::Ask,
        "a link out of docs/ is not docs/"
    );
    assert_eq!(decided(&r, &file("file.list", "docs")), Decision::Ask);
}

#[test]
fn a_push_rule_reads_its_remote() {
    let r = rules("dev", &["ask git.push", "allow git.push remote=fork*"]);
    let push =
        |remote: Option<&str>| CallFacts::new("git.push", &json!({ "remote": remote }), None, None);
    assert_eq!(decided(&r, &push(Some("fork-me"))), Decision::Allow);
    assert_eq!(decided(&r, &push(Some("origin"))), Decision::Ask);
    assert_eq!(
        decided(&r, &push(None)),
        Decision::Ask,
        "no remote is origin"
    );
}

fn connection(host: &str, port: u16) -> CallFacts {
    CallFacts::new(
        chorus_catalog::NETWORK,
        &json!({ "host": host, "port": port }),
        Some("/w"),
        None,
    )
}

#[test]
fn a_network_rule_reads_the_destinations_host_and_port() {
    let r = rules(
        "dev",
        &[
            "ask network",
            "allow network host=*.github.com:443",
            "deny network host=*:22",
            "allow network host=[2001:db8::1]:443",
            "deny network host=10.0.0.*",
        ],
    );
    assert_eq!(
        decided(&r, &connection("api.github.com", 443)),
        Decision::Allow
    );
    // Case and a trailing dot do not hide a name.
    assert_eq!(
        decided(&r, &connection("API.GitHub.com.", 443)),
        Decision::Allow
    );
    assert_eq!(
        decided(&r, &connection("api.github.com", 80)),
        Decision::Ask
    );
    // Not a subdomain: a name that merely ends alike.
    assert_eq!(
        decided(&r, &connection("evilgithub.com", 443)),
        Decision::Ask
    );
    assert_eq!(
        decided(&r, &connection("api.github.com", 22)),
        Decision::Deny
    );
    assert_eq!(
        decided(&r, &connection("2001:db8::1", 443)),
        Decision::Allow
    );
    assert_eq!(decided(&r, &connection("10.0.0.7", 443)), Decision::Deny);
    assert_eq!(decided(&r, &connection("pypi.org", 443)), Decision::Ask);
    // Every tool's rule covers the grant too; a bash rule does not.
    let all = rules("dev", &["deny *", "allow bash"]);
    assert_eq!(decided(&all, &connection("pypi.org", 443)), Decision::Deny);
    // Only runs whose rules could decide a connection have theirs asked about.
    assert!(r.mention(chorus_catalog::NETWORK) && all.mention(chorus_catalog::NETWORK));
    assert!(!rules("dev", &["ask bash", "deny file.*"]).mention(chorus_catalog::NETWORK));
    assert_eq!(
        rule("ask network host=*.example.com:*").to_string(),
        "ask network host=*.example.com:*"
    );
}

#[test]
fn a_child_never_gets_a_wider_rule_than_its_parent() {
    let parent = rules("lead", &["ask git.push", "deny bash command=rm"]);
    let child = rules("helper", &["allow git.push", "allow bash"]).under(Some(&parent));
    let ruling = child.rules_decide_push();
    assert_eq!(ruling.decision, Decision::Ask);
    assert_eq!(ruling.agent.as_deref(), Some("lead"));
    assert_eq!(decided(&child, &bash("rm -rf x")), Decision::Deny);
    assert_eq!(decided(&child, &bash("ls")), Decision::Allow);
    // A stricter child keeps its own rule.
    let strict = rules("helper", &["deny git.push"]).under(Some(&parent));
    assert_eq!(strict.rules_decide_push().decision, Decision::Deny);
}

impl RunRules {
    fn rules_decide_push(&self) -> Ruling {
        self.decide(&CallFacts::new("git.push", &json!({}), None, None), &[])
            .expect("decides")
    }
}

#[test]
fn an_ask_approved_for_the_task_allows_and_nothing_else() {
    let r = rules("dev", &["ask git.push", "deny bash"]);
    let approved = vec![rule("ask git.push").deciding(Decision::Allow)];
    let push = CallFacts::new("git.push", &json!({}), None, None);
    assert_eq!(
        r.decide(&push, &approved).expect("decides").decision,
        Decision::Allow
    );
    assert_eq!(
        r.decide(&bash("ls"), &[rule("deny bash").deciding(Decision::Allow)])
            .expect("decides")
            .decision,
        Decision::Deny,
        "a deny is never approved away"
    );
}

#[test]
fn rules_that_cannot_work_are_refused_with_the_reason() {
    let bad = |r: Rule, want: &str| {
        let err = r.check().expect_err(want).to_string();
        assert!(err.contains(want), "{err} should say {want}");
    };
    let base = |tool: &str, decision| Rule {
        tool: tool.into(),
        decision,
        ..Rule::default()
    };
    bad(base("Bash", Decision::Ask), "unknown tool 'Bash'");
    bad(base("net.*", Decision::Ask), "no tool family 'net'");
    for (host, want) in [
        ("github.com:http", "'http' is not a port"),
        ("github.com:0", "'0' is not a port"),
        ("[2001:db8::1", "an IPv6 address ends with ']'"),
        (":443", "is not a host"),
        ("a/b", "is not a host"),
    ] {
        bad(
            Rule {
                host: Some(host.into()),
                ..base("network", Decision::Deny)
            },
            want,
        );
    }
    bad(
        Rule {
            host: Some("github.com".into()),
            ..base("bash", Decision::Ask)
        },
        "bash has no host argument",
    );
    bad(
        Rule {
            path: Some("x".into()),
            ..base("bash", Decision::Ask)
        },
        "bash has no path argument",
    );
    bad(
        Rule {
            command: Some("x".into()),
            ..base("git.push", Decision::Ask)
        },
        "git.push has no command argument",
    );
    bad(
        Rule {
            command: Some("x".into()),
            path: Some("y".into()),
            ..base("bash", Decision::Ask)
        },
        "at most one of",
    );
    bad(
        Rule {
            path: Some("/etc/**".into()),
            ..base("file.read", Decision::Deny)
        },
        "can never match",
    );
    bad(
        Rule {
            path: Some("../x".into()),
            ..base("file.read", Decision::Deny)
        },
        "leaves the workspace",
    );
    bad(
        Rule {
            path: Some("[abc".into()),
            ..base("file.read", Decision::Deny)
        },
        "does not parse",
    );
    bad(
        Rule {
            command: Some("  ".into()),
            ..base("bash", Decision::Deny)
        },
        "matches nothing",
    );
    bad(
        Rule {
            deadline_s: Some(5),
            ..base("bash", Decision::Allow)
        },
        "only an ask rule",
    );
    bad(
        Rule {
            deadline_s: Some(0),
            ..base("bash", Decision::Ask)
        },
        "1 second or more",
    );
    bad(
        Rule {
            deadline_s: Some(MAX_DEADLINE_S + 1),
            ..base("bash", Decision::Ask)
        },
        "at most",
    );
    let many = vec![base("bash", Decision::Ask); MAX_RULES + 1];
    assert!(check_rules(&many).is_err());
}

#[test]
fn an_approval_is_asked_once_answered_once_and_ends_with_its_run() {
    let mut approvals = Approvals::default();
    let run = crate::domain::RunId::new();
    let asking = |key: &str| Asking {
        id: format!("ap-{key}"),
        run_id: run,
        agent: "dev".into(),
        call_key: key.into(),
        tool: "git.push".into(),
        arguments: json!({}),
        rule: rule("ask git.push"),
        rule_agent: "dev".into(),
    };
    let (first, events) = approvals.ask(asking("k1"), 1_000).expect("asks");
    assert_eq!(events.len(), 1);
    assert_eq!(
        first.deadline_ms,
        1_000 + i64::from(DEFAULT_DEADLINE_S) * 1000
    );
    // Asked again with the same key: the same approval, no new event.
    let (again, events) = approvals.ask(asking("k1"), 2_000).expect("finds");
    assert_eq!((again.id.as_str(), events.len()), ("ap-k1", 0));
    let answer = |outcome| Answer {
        outcome,
        by: "ops".into(),
        at_ms: 3_000,
        reason: None,
    };
    approvals
        .answer("ap-k1", answer(ApprovalOutcome::ApprovedForTask))
        .expect("answers");
    assert_eq!(approvals.task_rules, vec![rule("allow git.push")]);
    let err = approvals
        .answer("ap-k1", answer(ApprovalOutcome::Denied))
        .expect_err("answered once");
    assert!(
        err.to_string()
            .contains("already answered: approved_for_task by ops"),
        "{err}"
    );
    let err = approvals
        .answer("ap-nope", answer(ApprovalOutcome::Denied))
        .expect_err("unknown");
    assert!(err.to_string().contains("no approval 'ap-nope'"), "{err}");
    approvals.ask(asking("k2"), 4_000).expect("asks");
    assert_eq!(approvals.end_run(run, 5_000).len(), 1);
    let ended = approvals.of_call(run, "k2").expect("kept");
    assert!(
        ended.refusal().is_some_and(|r| r.contains("its run ended")),
        "{ended:?}"
    );
    assert!(
        approvals
            .end("ap-k2", ApprovalOutcome::Expired, 6_000)
            .is_empty(),
        "ends once"
    );
}
