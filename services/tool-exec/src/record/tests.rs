use serde_json::json;

use super::*;

fn text(value: &Value) -> String {
    value.to_string()
}

#[test]
fn a_small_input_is_kept_whole_with_its_size() {
    let input = json!({"path": "notes.txt", "content": "two notes\n", "n": 3});
    let (kept, bytes) = input_excerpt(&input);
    assert_eq!(kept, input);
    assert_eq!(bytes, text(&input).len() as u64);
}

#[test]
fn a_long_string_keeps_its_start_and_a_marker_with_its_length() {
    let content = "x".repeat(5_000_000);
    let input = json!({"path": "big.txt", "content": content});
    let (kept, bytes) = input_excerpt(&input);
    assert_eq!(bytes, text(&input).len() as u64);
    assert_eq!(kept["path"], "big.txt");
    let cut = kept["content"].as_str().expect("a string");
    assert!(cut.len() <= INPUT_STRING_BYTES, "{}", cut.len());
    assert!(cut.starts_with("xxxx"), "{cut}");
    assert!(cut.ends_with("…[5000000 bytes]"), "{cut}");
}

#[test]
fn strings_are_cut_at_a_character_boundary_wherever_they_are() {
    let long = "é".repeat(3000);
    let input = json!({"patches": [{"find": "a", "replace": long}], "deep": {"x": [long]}});
    let (kept, _) = input_excerpt(&input);
    for cut in [&kept["patches"][0]["replace"], &kept["deep"]["x"][0]] {
        let cut = cut.as_str().expect("a string");
        assert!(cut.len() <= INPUT_STRING_BYTES);
        assert!(cut.ends_with("…[6000 bytes]"), "{cut}");
        assert!(
            cut.trim_end_matches("…[6000 bytes]")
                .chars()
                .all(|c| c == 'é')
        );
    }
    assert_eq!(kept["patches"][0]["find"], "a");
}

#[test]
fn many_long_strings_are_cut_shorter_to_keep_the_whole_input_bounded() {
    let patches: Vec<Value> = (0..40)
        .map(|n| json!({"find": format!("{n}"), "replace": "y".repeat(10_000)}))
        .collect();
    let input = json!({"path": "a.rs", "patches": patches});
    let (kept, bytes) = input_excerpt(&input);
    assert_eq!(bytes, text(&input).len() as u64);
    assert!(text(&kept).len() <= INPUT_BYTES, "{}", text(&kept).len());
    assert_eq!(kept["patches"].as_array().expect("array").len(), 40);
    let replace = kept["patches"][39]["replace"].as_str().expect("string");
    assert!(replace.len() <= 512 && replace.ends_with("…[10000 bytes]"));
}

#[test]
fn an_input_too_big_even_cut_is_the_start_of_its_json_text() {
    let items: Vec<Value> = (0..20_000).map(|n| json!(n)).collect();
    let input = json!({"path": "a", "items": items});
    let (kept, bytes) = input_excerpt(&input);
    let whole = text(&input);
    assert_eq!(bytes, whole.len() as u64);
    assert_eq!(kept.as_object().expect("an object").len(), 1);
    let start = kept[JSON_START].as_str().expect("the JSON text's start");
    assert!(start.len() <= INPUT_STRING_BYTES);
    assert!(
        start.starts_with("{\"path\":\"a\",\"items\":[0,1,2"),
        "{start}"
    );
    assert!(
        start.ends_with(&format!("…[{} bytes]", whole.len())),
        "{start}"
    );
}

#[test]
fn the_rule_applied_twice_cuts_once() {
    let inputs = [
        json!({"content": "z".repeat(100_000)}),
        json!({"patches": (0..40).map(|_| json!({"find": "é".repeat(3000)})).collect::<Vec<_>>()}),
        json!((0..20_000).collect::<Vec<_>>()),
        json!({"short": "s"}),
    ];
    for input in inputs {
        let (once, _) = input_excerpt(&input);
        let (twice, _) = input_excerpt(&once);
        assert_eq!(twice, once);
    }
    let output = "ö".repeat(5000);
    assert_eq!(
        output_excerpt(&output_excerpt(&output)),
        output_excerpt(&output)
    );
}

#[test]
fn the_output_keeps_its_start_within_the_limit() {
    assert_eq!(output_excerpt("short"), "short");
    let cut = output_excerpt(&"é".repeat(OUTPUT_EXCERPT_BYTES));
    assert!(cut.len() <= OUTPUT_EXCERPT_BYTES);
    assert!(cut.ends_with('…'));
}

#[test]
fn a_record_notes_the_full_sizes_and_bounding_it_again_changes_nothing() {
    let input = json!({"path": "big.txt", "content": "c".repeat(3_000_000)});
    let output = format!("{{\"content\":\"{}\"}}", "o".repeat(10_000));
    let record = ToolCallRecord::new("file.create", &input, "ok", 7, &output);
    assert_eq!(record.input_bytes, text(&input).len() as u64);
    assert_eq!(record.output_bytes, output.len() as u64);
    assert!(record.output_excerpt.len() <= OUTPUT_EXCERPT_BYTES);
    assert_eq!(record.clone().bounded(), record);
}

#[test]
fn a_record_from_a_reporter_that_cut_nothing_is_bounded_with_its_sizes() {
    let input = json!({"content": "c".repeat(1_000_000)});
    let output = "o".repeat(9_000);
    let raw = ToolCallRecord {
        tool: "file.write".to_owned(),
        input: input.clone(),
        input_bytes: 0,
        status: "ok".to_owned(),
        duration_ms: 1,
        output_excerpt: output.clone(),
        output_bytes: 0,
        started_ms: 0,
    };
    assert_eq!(
        raw.bounded(),
        ToolCallRecord {
            started_ms: 0,
            ..ToolCallRecord::new("file.write", &input, "ok", 1, &output)
        }
    );
}
