use super::*;
use std::collections::HashSet;

#[test]
fn every_tool_has_a_unique_name_and_a_description() {
    let mut names = HashSet::new();
    for tool in TOOLS {
        assert!(names.insert(tool.name), "duplicate tool {}", tool.name);
        assert!(
            !tool.description.is_empty(),
            "{} has no description",
            tool.name
        );
    }
}

#[test]
fn the_catalog_covers_every_tool_the_system_knows() {
    let expected = [
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
        "handoff",
        "task.get",
        "task.list",
        "task.update_stage",
        "task.comment",
        "help",
        "completion-report",
        "planner-output",
        "web.search",
    ];
    let names: Vec<&str> = TOOLS.iter().map(|t| t.name).collect();
    assert_eq!(names, expected);
}

#[test]
fn every_schema_is_a_valid_self_contained_object_schema() {
    for tool in TOOLS {
        for (which, schema) in [
            ("input", tool.input_schema().clone()),
            ("output", tool.output_schema().clone()),
        ] {
            assert_eq!(
                schema["$schema"], "https://json-schema.org/draft/2020-12/schema",
                "{} {which} schema has no draft marker",
                tool.name
            );
            let text = schema.to_string();
            // Every $ref must point into the schema's own $defs.
            for piece in text.split("\"$ref\":\"").skip(1) {
                let target = piece.split('"').next().unwrap_or_default();
                let name = target
                    .strip_prefix("#/$defs/")
                    .unwrap_or_else(|| panic!("{} {which}: foreign $ref {target}", tool.name));
                assert!(
                    schema["$defs"].get(name).is_some(),
                    "{} {which}: dangling $ref {target}",
                    tool.name
                );
            }
        }
    }
}

/// Every tool's argument schema keeps the MCP rules: Claude Code refuses the
/// whole `tools/list` of a server when one tool's does not (planner-output's
/// bare `oneOf` left the planner with no tool at all).
#[test]
fn every_input_schema_keeps_the_mcp_rules() {
    for tool in TOOLS {
        let problems = mcp_rules::problems(tool.input_schema());
        assert!(
            problems.is_empty(),
            "{}'s input schema breaks the MCP rules: {problems:?}\n{}",
            tool.name,
            tool.input_schema()
        );
    }
}

#[test]
fn the_planners_choice_is_an_object_whose_tag_every_verdict_requires() {
    let schema = get("planner-output")
        .expect("planner-output")
        .input_schema();
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["required"], serde_json::json!(["type"]));
    assert_eq!(
        schema["properties"]["type"]["enum"],
        serde_json::json!(["plan", "questions", "error"])
    );
    assert_eq!(schema["oneOf"].as_array().map(Vec::len), Some(3));
}

#[test]
fn required_arguments_come_from_the_rust_types() {
    let read = get("file.read").expect("file.read").input_schema();
    assert_eq!(read["required"], serde_json::json!(["path"]));
    assert_eq!(
        read["additionalProperties"], false,
        "unknown arguments must be refused"
    );
    let patch = get("file.patch").expect("file.patch").input_schema();
    let mut required: Vec<&str> = patch["required"]
        .as_array()
        .expect("required")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    required.sort_unstable();
    assert_eq!(required, ["patches", "path"]);
}

#[test]
fn profiles_name_only_catalog_tools() {
    for profile in PROFILES {
        for tool in profile.tools {
            assert!(
                get(tool).is_some(),
                "profile {} names unknown tool {tool}",
                profile.name
            );
        }
    }
}

#[test]
fn profiles_grant_what_they_promise() {
    let researcher = expand_allow_list(&["@researcher"]).expect("expands");
    assert!(
        researcher.contains("file.read")
            && researcher.contains("bash")
            && researcher.contains("task.comment")
    );
    assert!(
        !researcher.contains("file.write")
            && !researcher.contains("git.commit")
            && !researcher.contains("task.update_stage")
    );
    let reviewer = expand_allow_list(&["@reviewer"]).expect("expands");
    assert!(reviewer.contains("task.update_stage") && !reviewer.contains("file.patch"));
    let developer = expand_allow_list(&["@developer"]).expect("expands");
    for tool in TOOLS
        .iter()
        .filter(|t| matches!(t.category, Category::File | Category::Git))
    {
        assert!(
            developer.contains(tool.name),
            "developer lacks {}",
            tool.name
        );
    }
    assert!(developer.contains("task.list") && !developer.contains("handoff"));
}

#[test]
fn every_allow_list_reaches_the_reporting_tools_but_not_the_planners() {
    let nothing = expand_allow_list::<&str>(&[]).expect("expands");
    assert!(nothing.contains("completion-report") && nothing.contains("help"));
    assert!(!nothing.contains("planner-output"));
}

#[test]
fn unknown_names_in_allow_lists_are_errors_that_list_the_choices() {
    let err = expand_allow_list(&["Read"]).expect_err("unknown tool");
    assert!(
        err.to_string().contains("unknown tool 'Read'") && err.to_string().contains("file.read")
    );
    let err = expand_allow_list(&["@admin"]).expect_err("unknown profile");
    assert!(err.to_string().contains("@researcher"));
}

#[test]
fn help_lists_required_and_optional_arguments_with_a_runnable_example() {
    let read = help_tool(get("file.read").expect("file.read"));
    let names: Vec<(&str, bool, &str)> = read
        .arguments
        .iter()
        .map(|a| (a.name.as_str(), a.required, a.kind.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("path", true, "string"),
            ("offset", false, "integer"),
            ("limit", false, "integer")
        ]
    );
    assert!(
        read.arguments[0]
            .description
            .contains("relative to the workspace root")
    );
    assert_eq!(
        read.example,
        r#"chorus-tools '{"tool":"file.read","path":"<path>"}'"#
    );

    let stage = help_tool(get("task.update_stage").expect("stage"));
    assert_eq!(stage.arguments[0].kind, "string");
    assert!(
        stage.example.contains(r#""stage":"backlog""#),
        "{}",
        stage.example
    );
}

#[test]
fn every_example_parses_into_the_tools_own_arguments() {
    for tool in TOOLS {
        let help = help_tool(tool);
        let json = help
            .example
            .trim_start_matches("chorus-tools '")
            .trim_end_matches('\'');
        let mut value: serde_json::Value = serde_json::from_str(json).expect("example is JSON");
        value.as_object_mut().expect("object").remove("tool");
        let parsed = match tool.name {
            "file.read" => serde_json::from_value::<args::FileRead>(value).map(drop),
            "file.patch" => serde_json::from_value::<args::FilePatch>(value).map(drop),
            "completion-report" => {
                serde_json::from_value::<args::CompletionReport>(value).map(drop)
            }
            "planner-output" => serde_json::from_value::<args::PlannerOutput>(value).map(drop),
            "task.update_stage" => serde_json::from_value::<args::TaskUpdateStage>(value).map(drop),
            "git.commit" => serde_json::from_value::<args::GitCommit>(value).map(drop),
            _ => Ok(()),
        };
        parsed.unwrap_or_else(|e| panic!("{} example does not parse: {e}", tool.name));
    }
}

#[test]
fn help_is_filtered_to_the_granted_tools() {
    let granted = expand_allow_list(&["file.read"]).expect("expands");
    let help = help_for(granted.iter().copied(), None);
    let names: Vec<&str> = help.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["file.read", "help", "completion-report"]);
    let one = help_for(granted.iter().copied(), Some("file.read"));
    assert_eq!(one.tools.len(), 1);
}

#[test]
fn the_network_grant_is_a_name_of_its_own_and_in_no_profile() {
    let granted = expand_allow_list(&["bash", "network"]).expect("expands");
    assert!(granted.contains("network") && granted.contains("bash"));
    for profile in PROFILES {
        assert!(
            !profile.tools.contains(&NETWORK),
            "@{} grants network",
            profile.name
        );
    }
    // It is not a tool: it never shows in a run's tool list.
    assert!(!granted_names(&["network"]).contains(&"network"));
    let err = expand_allow_list(&["netwerk"]).expect_err("unknown");
    assert!(err.to_string().contains("grants: network"), "{err}");
}

#[test]
fn the_planners_help_lists_the_arguments_of_every_verdict() {
    let spec = get("planner-output").expect("planner-output");
    let help = help_tool(spec);
    let names: Vec<&str> = help.arguments.iter().map(|a| a.name.as_str()).collect();
    for name in [
        "type",
        "summary",
        "acceptance_criteria",
        "assigned_agent",
        "questions",
        "error",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    let tag = &help.arguments[0];
    assert_eq!((tag.name.as_str(), tag.required), ("type", true));
    assert_eq!(tag.description, "one of: plan, questions, error");
    assert!(
        help.example.contains(r#""type":"questions""#),
        "{}",
        help.example
    );
}

#[test]
fn every_tool_has_one_wire_name_that_finds_it_again() {
    let mut seen = std::collections::BTreeSet::new();
    for spec in TOOLS {
        let wire = wire_name(spec.name);
        assert!(
            wire.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "{wire}"
        );
        assert!(seen.insert(wire.clone()), "{wire} names two tools");
        assert_eq!(by_wire_name(&wire).map(|t| t.name), Some(spec.name));
        assert_eq!(by_wire_name(spec.name).map(|t| t.name), Some(spec.name));
    }
    assert!(by_wire_name("file_reads").is_none());
}
