//! What an MCP client (and a function-calling API) accepts as a tool's
//! argument schema: the MCP schema's `Tool.inputSchema` — an object schema
//! (`"type": "object"` at its root), its `properties` an object of schemas,
//! its `required` a list of names it declares. The catalog derives every
//! face's schemas, and the tests of each face hold them to these rules.

use serde_json::Value;

/// What breaks the MCP rules in `schema`; empty when it keeps them.
pub fn problems(schema: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(object) = schema.as_object() else {
        return vec!["the schema is not a JSON object".to_owned()];
    };
    if object.get("type").and_then(Value::as_str) != Some("object") {
        problems.push(format!(
            "its root has type {}, not \"object\"",
            object
                .get("type")
                .map_or("(none)".to_owned(), Value::to_string)
        ));
    }
    let properties = object.get("properties");
    if let Some(properties) = properties {
        match properties.as_object() {
            Some(map) => {
                for (name, property) in map {
                    if !property.is_object() {
                        problems.push(format!("property '{name}' is not a schema object"));
                    }
                }
            }
            None => problems.push("properties is not an object".to_owned()),
        }
    }
    if let Some(required) = object.get("required") {
        match required.as_array() {
            Some(names) => {
                for name in names {
                    match name.as_str() {
                        Some(name) if properties.and_then(|p| p.get(name)).is_some() => {}
                        Some(name) => problems.push(format!(
                            "'{name}' is required but not among the root properties"
                        )),
                        None => problems.push(format!("required holds {name}, not a name")),
                    }
                }
            }
            None => problems.push("required is not a list".to_owned()),
        }
    }
    problems
}

/// The values the property `tag` takes in each of `alternatives` (a tagged
/// choice's `const`s or one-value `enum`s); None unless every alternative
/// has one.
pub(crate) fn tag_values(alternatives: &[Value], tag: &str) -> Option<Vec<Value>> {
    alternatives
        .iter()
        .map(|a| {
            let property = a.pointer(&format!("/properties/{tag}"))?;
            property
                .get("const")
                .or_else(|| property.pointer("/enum/0"))
                .cloned()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_bare_choice_and_a_stray_required_name_break_the_rules() {
        assert!(
            problems(&json!({"type": "object", "properties": {"a": {}}, "required": ["a"]}))
                .is_empty()
        );
        assert_eq!(
            problems(&json!({"oneOf": [{"type": "object"}]})),
            ["its root has type (none), not \"object\""]
        );
        assert_eq!(
            problems(&json!({"type": "object", "required": ["b"]})),
            ["'b' is required but not among the root properties"]
        );
    }
}
