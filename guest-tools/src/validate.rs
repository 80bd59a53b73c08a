//! Argument validation that mirrors the schema conversion exactly.
//!
//! Properties are visited in declaration order; each value yields at most one violation (a wrong
//! type stops its enum and nested checks), nested values add theirs in walk order. Extra keys are
//! allowed and defaults are never applied: validation only reports, it never rewrites.

use crate::json::Json;
use crate::schema::{Kind, Param, Prop};

/// Every violation of `args` against `params`, in walk order; empty when valid.
pub fn validate(params: &[Param], args: &Json) -> Vec<String> {
    if !matches!(args, Json::Object(_)) {
        return vec!["\"arguments\" must be an object".to_string()];
    }
    let mut out = Vec::new();
    check_properties(params, args, None, &mut out);
    out
}

/// Visit the declared properties of the object `obj`, whose own path is `prefix`.
fn check_properties(params: &[Param], obj: &Json, prefix: Option<&str>, out: &mut Vec<String>) {
    for param in params {
        let path = match prefix {
            Some(prefix) => format!("{prefix}.{}", param.name),
            None => param.name.clone(),
        };
        match obj.get(&param.name) {
            // `null` is present, so it is checked (and fails its type) rather than missing.
            Some(value) => check_value(&param.prop, value, &path, out),
            None if param.prop.required => {
                out.push(format!("missing required property \"{path}\""))
            }
            None => {}
        }
    }
}

fn check_value(prop: &Prop, value: &Json, path: &str, out: &mut Vec<String>) {
    if !has_kind(&prop.kind, value) {
        out.push(format!("\"{path}\" must be {}", prop.kind.with_article()));
        return;
    }
    if let Some(values) = &prop.enum_values
        && prop.kind.is_scalar()
        && !is_member(values, value)
    {
        let list = Json::Array(values.iter().map(|v| Json::String(v.clone())).collect());
        out.push(format!(
            "\"{path}\" must be one of {}",
            list.to_json_string()
        ));
        return;
    }
    match &prop.kind {
        Kind::Object(Some(params)) => check_properties(params, value, Some(path), out),
        Kind::Array(Some(item)) => {
            if let Json::Array(items) = value {
                for (i, element) in items.iter().enumerate() {
                    check_value(item, element, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

fn has_kind(kind: &Kind, value: &Json) -> bool {
    matches!(
        (kind, value),
        (Kind::String, Json::String(_))
            | (Kind::Number, Json::Number(_))
            | (Kind::Boolean, Json::Bool(_))
            | (Kind::Object(_), Json::Object(_))
            | (Kind::Array(_), Json::Array(_))
    )
}

/// Enum values are strings, so only a string can be a member.
fn is_member(values: &[String], value: &Json) -> bool {
    match value {
        Json::String(s) => values.iter().any(|v| v == s),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(params: &[Param], args: &str) -> Vec<String> {
        validate(params, &Json::parse(args).unwrap())
    }

    fn bash_like() -> Vec<Param> {
        vec![
            Param::new("command", Prop::string().required()),
            Param::new("description", Prop::string().required()),
            Param::new("timeoutMs", Prop::number()),
            Param::new("run_in_background", Prop::boolean()),
        ]
    }

    #[test]
    fn arguments_must_be_an_object() {
        for text in ["null", "[]", "[{}]", "\"x\"", "1", "true"] {
            assert_eq!(
                check(&bash_like(), text),
                vec!["\"arguments\" must be an object"],
                "{text}"
            );
        }
    }

    #[test]
    fn missing_required_in_declaration_order() {
        assert_eq!(
            check(&bash_like(), "{}"),
            vec![
                "missing required property \"command\"",
                "missing required property \"description\""
            ]
        );
    }

    #[test]
    fn optional_absent_is_skipped() {
        assert!(check(&bash_like(), r#"{"command":"ls","description":"d"}"#).is_empty());
    }

    #[test]
    fn null_is_a_type_violation_not_missing() {
        assert_eq!(
            check(
                &bash_like(),
                r#"{"command":null,"description":"d","timeoutMs":null}"#
            ),
            vec![
                "\"command\" must be a string",
                "\"timeoutMs\" must be a number"
            ]
        );
    }

    #[test]
    fn every_type_message() {
        let params = vec![
            Param::new("s", Prop::string()),
            Param::new("n", Prop::number()),
            Param::new("b", Prop::boolean()),
            Param::new("o", Prop::object()),
            Param::new("a", Prop::array()),
        ];
        assert_eq!(
            check(&params, r#"{"s":1,"n":"1","b":"true","o":"x","a":{}}"#),
            vec![
                "\"s\" must be a string",
                "\"n\" must be a number",
                "\"b\" must be a boolean",
                "\"o\" must be an object",
                "\"a\" must be an array"
            ]
        );
    }

    #[test]
    fn arrays_are_not_objects() {
        let params = vec![Param::new("o", Prop::object())];
        assert_eq!(
            check(&params, r#"{"o":[]}"#),
            vec!["\"o\" must be an object"]
        );
        assert_eq!(
            check(&params, r#"{"o":null}"#),
            vec!["\"o\" must be an object"]
        );
    }

    #[test]
    fn enum_checked_after_type() {
        let params = vec![Param::new(
            "color",
            Prop::string().required().one_of(&["red", "green"]),
        )];
        assert!(check(&params, r#"{"color":"red"}"#).is_empty());
        assert_eq!(
            check(&params, r#"{"color":"blue"}"#),
            vec!["\"color\" must be one of [\"red\",\"green\"]"]
        );
        // A wrong type reports the type only.
        assert_eq!(
            check(&params, r#"{"color":3}"#),
            vec!["\"color\" must be a string"]
        );
    }

    #[test]
    fn number_is_never_an_enum_member() {
        let params = vec![Param::new("n", Prop::number().one_of(&["1", "2"]))];
        assert_eq!(
            check(&params, r#"{"n":1}"#),
            vec!["\"n\" must be one of [\"1\",\"2\"]"]
        );
        let params = vec![Param::new("b", Prop::boolean().one_of(&["true"]))];
        assert_eq!(
            check(&params, r#"{"b":true}"#),
            vec!["\"b\" must be one of [\"true\"]"]
        );
    }

    #[test]
    fn empty_enum_admits_nothing() {
        let params = vec![Param::new("s", Prop::string().one_of(&[]))];
        assert_eq!(
            check(&params, r#"{"s":""}"#),
            vec!["\"s\" must be one of []"]
        );
    }

    #[test]
    fn enum_on_object_is_not_checked() {
        let params = vec![Param::new("o", Prop::object().one_of(&["x"]))];
        assert!(check(&params, r#"{"o":{}}"#).is_empty());
    }

    #[test]
    fn nested_object_paths() {
        let params = vec![Param::new(
            "config",
            Prop::object_with(vec![
                Param::new("host", Prop::string().required()),
                Param::new("port", Prop::number()),
                Param::new(
                    "tls",
                    Prop::object_with(vec![Param::new("cert", Prop::string().required())]),
                ),
            ]),
        )];
        assert_eq!(
            check(&params, r#"{"config":{"port":"80","tls":{}}}"#),
            vec![
                "missing required property \"config.host\"",
                "\"config.port\" must be a number",
                "missing required property \"config.tls.cert\""
            ]
        );
        assert_eq!(
            check(&params, r#"{"config":{"host":1,"tls":{"cert":false}}}"#),
            vec![
                "\"config.host\" must be a string",
                "\"config.tls.cert\" must be a string"
            ]
        );
    }

    #[test]
    fn array_item_paths() {
        let params = vec![Param::new("tags", Prop::array_of(Prop::string()))];
        assert_eq!(
            check(&params, r#"{"tags":["a",2,"c",null]}"#),
            vec![
                "\"tags[1]\" must be a string",
                "\"tags[3]\" must be a string"
            ]
        );
        assert!(check(&params, r#"{"tags":[]}"#).is_empty());
    }

    #[test]
    fn array_of_objects_paths() {
        let params = vec![Param::new(
            "servers",
            Prop::array_of(Prop::object_with(vec![
                Param::new("host", Prop::string().required()),
                Param::new("ports", Prop::array_of(Prop::number())),
            ])),
        )];
        assert_eq!(
            check(
                &params,
                r#"{"servers":[{"host":"a"},{"host":5},{},{"host":"b","ports":[1,"2"]},"x"]}"#
            ),
            vec![
                "\"servers[1].host\" must be a string",
                "missing required property \"servers[2].host\"",
                "\"servers[3].ports[1]\" must be a number",
                "\"servers[4]\" must be an object"
            ]
        );
    }

    #[test]
    fn array_item_enum() {
        let params = vec![Param::new(
            "colors",
            Prop::array_of(Prop::string().one_of(&["red"])),
        )];
        assert_eq!(
            check(&params, r#"{"colors":["red","blue"]}"#),
            vec!["\"colors[1]\" must be one of [\"red\"]"]
        );
    }

    #[test]
    fn type_failure_stops_nested_checks() {
        let params = vec![Param::new(
            "config",
            Prop::object_with(vec![Param::new("host", Prop::string().required())]),
        )];
        assert_eq!(
            check(&params, r#"{"config":[]}"#),
            vec!["\"config\" must be an object"]
        );
    }

    #[test]
    fn items_required_flag_is_ignored() {
        let params = vec![Param::new(
            "tags",
            Prop::array_of(Prop::string().required()),
        )];
        assert!(check(&params, r#"{"tags":[]}"#).is_empty());
    }

    #[test]
    fn extra_keys_are_allowed() {
        assert!(
            check(
                &bash_like(),
                r#"{"command":"ls","description":"d","env":{"A":"1"},"stdin":"x"}"#
            )
            .is_empty()
        );
        let params = vec![Param::new(
            "config",
            Prop::object_with(vec![Param::new("host", Prop::string())]),
        )];
        assert!(check(&params, r#"{"config":{"other":1}}"#).is_empty());
    }

    #[test]
    fn undeclared_object_and_array_are_only_type_checked() {
        let params = vec![
            Param::new("o", Prop::object()),
            Param::new("a", Prop::array()),
        ];
        assert!(check(&params, r#"{"o":{"x":null,"y":[1]},"a":[null,{},"s",1]}"#).is_empty());
    }

    #[test]
    fn defaults_are_never_applied() {
        let params = vec![Param::new(
            "n",
            Prop::number().required().default_value(Json::Number(5.0)),
        )];
        assert_eq!(
            check(&params, "{}"),
            vec!["missing required property \"n\""]
        );
        let args = Json::parse("{}").unwrap();
        validate(&params, &args);
        assert_eq!(args, Json::Object(vec![]));
    }

    #[test]
    fn empty_declared_properties_check_nothing_inside() {
        let params = vec![Param::new("o", Prop::object_with(vec![]))];
        assert!(check(&params, r#"{"o":{"a":1}}"#).is_empty());
    }
}
