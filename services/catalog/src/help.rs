//! The `help` answer, derived from the tools' argument schemas.

use serde_json::{Map, Value, json};

use crate::outputs::{Help, HelpArgument, HelpTool};
use crate::{TOOLS, ToolSpec};

/// Describes one tool: its arguments (from the schema) and an example invocation.
pub fn help_tool(spec: &ToolSpec) -> HelpTool {
    spec.help().clone()
}

/// Derives the help of a tool from its input schema.
pub(crate) fn describe(spec: &ToolSpec, schema: &Value) -> HelpTool {
    let empty = Map::new();
    // A tagged choice (planner-output's plan, questions or error) has its
    // arguments in its alternatives: all of them are listed, required only
    // where every alternative requires them.
    let alternatives: Vec<&Value> = match schema.get("oneOf").and_then(Value::as_array) {
        Some(alternatives) => alternatives.iter().collect(),
        None => vec![schema],
    };
    let merged = merged_properties(&alternatives);
    let properties = if merged.is_empty() { &empty } else { &merged };
    let required = required_by_all(&alternatives);
    let required: Vec<&str> = required.iter().map(String::as_str).collect();
    let defs = schema
        .get("$defs")
        .and_then(Value::as_object)
        .unwrap_or(&empty);

    let mut arguments: Vec<HelpArgument> = properties
        .iter()
        .map(|(name, prop)| HelpArgument {
            name: name.clone(),
            kind: json_type(prop, defs),
            required: required.contains(&name.as_str()),
            description: prop
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        })
        .collect();
    // Required arguments first, each group in schema order.
    arguments.sort_by_key(|a| !a.required);
    let example = example(spec, &arguments, properties, defs);
    HelpTool {
        name: spec.name.to_owned(),
        description: spec.description.to_owned(),
        arguments,
        example: format!("chorus-tools '{}'", Value::Object(example)),
    }
}

/// The properties of all the alternatives, the first of each name kept; a
/// tag's values become its description ("one of: plan, questions, error").
fn merged_properties(alternatives: &[&Value]) -> Map<String, Value> {
    let mut merged = Map::new();
    for alternative in alternatives {
        if let Some(props) = alternative.get("properties").and_then(Value::as_object) {
            for (name, prop) in props {
                merged.entry(name.clone()).or_insert_with(|| prop.clone());
            }
        }
    }
    if alternatives.len() > 1 {
        for (name, prop) in merged.iter_mut() {
            let values: Vec<String> = alternatives
                .iter()
                .filter_map(|a| a.pointer(&format!("/properties/{name}")))
                .filter_map(|p| {
                    p.get("const")
                        .or_else(|| p.pointer("/enum/0"))
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                })
                .collect();
            if values.len() > 1 && prop.get("description").is_none() {
                prop["description"] = Value::String(format!("one of: {}", values.join(", ")));
            }
        }
    }
    merged
}

/// The arguments every alternative requires.
fn required_by_all(alternatives: &[&Value]) -> Vec<String> {
    let required_by = |alternative: &Value| -> Vec<String> {
        alternative
            .get("required")
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    required_by(alternatives[0])
        .into_iter()
        .filter(|name| alternatives.iter().all(|a| required_by(a).contains(name)))
        .collect()
}

/// An example call: the tool and a placeholder for each required argument.
fn example(
    spec: &ToolSpec,
    arguments: &[HelpArgument],
    properties: &Map<String, Value>,
    defs: &Map<String, Value>,
) -> Map<String, Value> {
    let mut example = Map::new();
    example.insert("tool".to_owned(), Value::String(spec.name.to_owned()));
    if spec.name == "planner-output" {
        example.insert("type".to_owned(), json!("questions"));
        example.insert("questions".to_owned(), json!(["<question>"]));
    }
    for arg in arguments.iter().filter(|a| a.required) {
        if example.contains_key(&arg.name) {
            continue;
        }
        example.insert(
            arg.name.clone(),
            placeholder(&arg.name, &arg.kind, properties.get(&arg.name), defs),
        );
    }
    example
}

/// The help answer for a set of granted tools, or for one of them.
pub fn help_for<'a>(granted: impl IntoIterator<Item = &'a str>, only: Option<&str>) -> Help {
    let granted: Vec<&str> = granted.into_iter().collect();
    Help {
        tools: TOOLS
            .iter()
            .filter(|t| granted.contains(&t.name))
            .filter(|t| only.is_none_or(|o| o == t.name))
            .map(help_tool)
            .collect(),
    }
}

fn json_type(prop: &Value, defs: &Map<String, Value>) -> String {
    let resolved = resolve(prop, defs);
    match resolved.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null")
            .to_owned(),
        _ if resolved.get("enum").is_some() || resolved.get("oneOf").is_some() => {
            "string".to_owned()
        }
        _ => resolved
            .get("anyOf")
            .and_then(Value::as_array)
            .and_then(|alts| {
                alts.iter()
                    .map(|alt| json_type(alt, defs))
                    .find(|t| t != "null")
            })
            .unwrap_or_else(|| "object".to_owned()),
    }
}

fn resolve<'a>(prop: &'a Value, defs: &'a Map<String, Value>) -> &'a Value {
    prop.get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/$defs/"))
        .and_then(|name| defs.get(name))
        .unwrap_or(prop)
}

fn placeholder(name: &str, kind: &str, prop: Option<&Value>, defs: &Map<String, Value>) -> Value {
    let first_enum = prop.map(|p| resolve(p, defs)).and_then(|p| {
        p.get("enum")
            .and_then(Value::as_array)
            .and_then(|e| e.first().cloned())
            .or_else(|| {
                p.get("oneOf")
                    .and_then(Value::as_array)
                    .and_then(|alts| alts.first())
                    .and_then(|alt| {
                        alt.get("const")
                            .or_else(|| alt.get("enum").and_then(|e| e.get(0)))
                    })
                    .cloned()
            })
    });
    if let Some(value) = first_enum {
        return value;
    }
    match kind {
        "integer" | "number" => json!(1),
        "boolean" => json!(true),
        "array" => json!([]),
        "object" => json!({}),
        _ => Value::String(format!("<{name}>")),
    }
}
