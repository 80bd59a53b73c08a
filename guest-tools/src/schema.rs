//! The parameter DSL and its JSON Schema.
//!
//! A tool declares its parameters once with [`Param`] and [`Prop`]; the same declaration becomes
//! the JSON Schema the model sees ([`to_json_schema`]) and drives the validator
//! (`crate::validate`), so the two can never disagree.

use crate::json::Json;

/// A property's kind. Nested declarations live in the kinds that can have them.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    String,
    Number,
    Boolean,
    /// An object, with or without a declaration of its properties.
    Object(Option<Vec<Param>>),
    /// An array, with or without a declaration of its items.
    Array(Option<Box<Prop>>),
}

impl Kind {
    /// The JSON Schema `type` name.
    pub fn type_name(&self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::Number => "number",
            Kind::Boolean => "boolean",
            Kind::Object(_) => "object",
            Kind::Array(_) => "array",
        }
    }

    /// The type with its article, as violation messages say it.
    pub fn with_article(&self) -> &'static str {
        match self {
            Kind::String => "a string",
            Kind::Number => "a number",
            Kind::Boolean => "a boolean",
            Kind::Object(_) => "an object",
            Kind::Array(_) => "an array",
        }
    }

    /// Scalar kinds are the ones an `enum` constrains.
    pub fn is_scalar(&self) -> bool {
        matches!(self, Kind::String | Kind::Number | Kind::Boolean)
    }
}

/// One property: its kind and what the model is told about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Prop {
    pub kind: Kind,
    pub required: bool,
    /// Emitted only when non-empty.
    pub description: String,
    /// Allowed string values; emitted whenever present, even empty.
    pub enum_values: Option<Vec<String>>,
    /// Emitted whenever present (`null` included), never applied.
    pub default: Option<Json>,
}

/// A named property, in declaration order.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    pub name: String,
    pub prop: Prop,
}

impl Param {
    pub fn new(name: &str, prop: Prop) -> Param {
        Param {
            name: name.to_string(),
            prop,
        }
    }
}

impl Prop {
    fn of(kind: Kind) -> Prop {
        Prop {
            kind,
            required: false,
            description: String::new(),
            enum_values: None,
            default: None,
        }
    }

    pub fn string() -> Prop {
        Prop::of(Kind::String)
    }

    pub fn number() -> Prop {
        Prop::of(Kind::Number)
    }

    pub fn boolean() -> Prop {
        Prop::of(Kind::Boolean)
    }

    /// An object whose content is only type-checked.
    pub fn object() -> Prop {
        Prop::of(Kind::Object(None))
    }

    /// An object with declared properties.
    pub fn object_with(properties: Vec<Param>) -> Prop {
        Prop::of(Kind::Object(Some(properties)))
    }

    /// An array whose items are only type-checked as an array.
    pub fn array() -> Prop {
        Prop::of(Kind::Array(None))
    }

    /// An array with declared items (the item's own `required` flag is ignored).
    pub fn array_of(items: Prop) -> Prop {
        Prop::of(Kind::Array(Some(Box::new(items))))
    }

    pub fn required(mut self) -> Prop {
        self.required = true;
        self
    }

    pub fn describe(mut self, description: &str) -> Prop {
        self.description = description.to_string();
        self
    }

    pub fn one_of(mut self, values: &[&str]) -> Prop {
        self.enum_values = Some(values.iter().map(|v| v.to_string()).collect());
        self
    }

    pub fn default_value(mut self, value: Json) -> Prop {
        self.default = Some(value);
        self
    }

    /// This property's JSON Schema, keys in the contract's order.
    pub fn to_json(&self) -> Json {
        let mut out = vec![(
            "type".to_string(),
            Json::String(self.kind.type_name().into()),
        )];
        if !self.description.is_empty() {
            out.push(("description".into(), Json::String(self.description.clone())));
        }
        if let Some(values) = &self.enum_values {
            let values = values.iter().map(|v| Json::String(v.clone())).collect();
            out.push(("enum".into(), Json::Array(values)));
        }
        if let Some(default) = &self.default {
            out.push(("default".into(), default.clone()));
        }
        match &self.kind {
            Kind::Object(Some(properties)) => out.extend(properties_and_required(properties)),
            Kind::Array(Some(items)) => out.push(("items".into(), items.to_json())),
            _ => {}
        }
        Json::Object(out)
    }
}

/// `properties`, then `required` only when some property is required.
fn properties_and_required(params: &[Param]) -> Vec<(String, Json)> {
    let properties = params
        .iter()
        .map(|p| (p.name.clone(), p.prop.to_json()))
        .collect();
    let required: Vec<Json> = params
        .iter()
        .filter(|p| p.prop.required)
        .map(|p| Json::String(p.name.clone()))
        .collect();
    let mut out = vec![("properties".to_string(), Json::Object(properties))];
    if !required.is_empty() {
        out.push(("required".into(), Json::Array(required)));
    }
    out
}

/// The tool's input schema: `{"type":"object","properties":{...}}` plus `required` when needed.
pub fn to_json_schema(params: &[Param]) -> Json {
    let mut out = vec![("type".to_string(), Json::String("object".into()))];
    out.extend(properties_and_required(params));
    Json::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(params: Vec<Param>) -> String {
        to_json_schema(&params).to_json_string()
    }

    #[test]
    fn no_params_no_required() {
        assert_eq!(schema(vec![]), r#"{"type":"object","properties":{}}"#);
    }

    #[test]
    fn required_only_when_some_property_is_required() {
        assert_eq!(
            schema(vec![Param::new("a", Prop::string())]),
            r#"{"type":"object","properties":{"a":{"type":"string"}}}"#
        );
        assert_eq!(
            schema(vec![
                Param::new("b", Prop::number().required()),
                Param::new("c", Prop::boolean()),
                Param::new("a", Prop::string().required()),
            ]),
            r#"{"type":"object","properties":{"b":{"type":"number"},"c":{"type":"boolean"},"a":{"type":"string"}},"required":["b","a"]}"#
        );
    }

    #[test]
    fn property_key_order_type_description_enum_default() {
        let p = Prop::string()
            .default_value(Json::String("red".into()))
            .one_of(&["red", "green"])
            .describe("A colour.");
        assert_eq!(
            p.to_json().to_json_string(),
            r#"{"type":"string","description":"A colour.","enum":["red","green"],"default":"red"}"#
        );
    }

    #[test]
    fn empty_description_is_omitted() {
        assert_eq!(
            Prop::string().describe("").to_json().to_json_string(),
            r#"{"type":"string"}"#
        );
    }

    #[test]
    fn empty_enum_and_null_default_are_emitted() {
        assert_eq!(
            Prop::string()
                .one_of(&[])
                .default_value(Json::Null)
                .to_json()
                .to_json_string(),
            r#"{"type":"string","enum":[],"default":null}"#
        );
    }

    #[test]
    fn default_of_any_json_value_is_emitted_as_json_stringify_would() {
        let def = Json::parse(r#"{"x":[1.0,false],"y":"z"}"#).unwrap();
        assert_eq!(
            Prop::object().default_value(def).to_json().to_json_string(),
            r#"{"type":"object","default":{"x":[1,false],"y":"z"}}"#
        );
        assert_eq!(
            Prop::number()
                .default_value(Json::Number(1.5))
                .to_json()
                .to_json_string(),
            r#"{"type":"number","default":1.5}"#
        );
    }

    #[test]
    fn bare_object_and_array() {
        assert_eq!(
            Prop::object().to_json().to_json_string(),
            r#"{"type":"object"}"#
        );
        assert_eq!(
            Prop::array().to_json().to_json_string(),
            r#"{"type":"array"}"#
        );
    }

    #[test]
    fn nested_object_with_properties_and_required_after_default() {
        let p = Prop::object_with(vec![
            Param::new("host", Prop::string().required()),
            Param::new("port", Prop::number()),
        ])
        .describe("Config.")
        .default_value(Json::Null);
        assert_eq!(
            p.to_json().to_json_string(),
            r#"{"type":"object","description":"Config.","default":null,"properties":{"host":{"type":"string"},"port":{"type":"number"}},"required":["host"]}"#
        );
    }

    #[test]
    fn declared_but_empty_properties_are_emitted() {
        assert_eq!(
            Prop::object_with(vec![]).to_json().to_json_string(),
            r#"{"type":"object","properties":{}}"#
        );
    }

    #[test]
    fn nested_required_omitted_when_empty() {
        let p = Prop::object_with(vec![Param::new("port", Prop::number())]);
        assert_eq!(
            p.to_json().to_json_string(),
            r#"{"type":"object","properties":{"port":{"type":"number"}}}"#
        );
    }

    #[test]
    fn array_items_ignore_the_items_required_flag() {
        let p = Prop::array_of(Prop::string().required().describe("A tag."));
        assert_eq!(
            p.to_json().to_json_string(),
            r#"{"type":"array","items":{"type":"string","description":"A tag."}}"#
        );
    }

    #[test]
    fn array_of_objects_carries_nested_required() {
        let p = Prop::array_of(Prop::object_with(vec![
            Param::new("host", Prop::string().required()),
            Param::new("tags", Prop::array_of(Prop::string())),
        ]))
        .describe("Servers.");
        assert_eq!(
            p.to_json().to_json_string(),
            r#"{"type":"array","description":"Servers.","items":{"type":"object","properties":{"host":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}}},"required":["host"]}}"#
        );
    }

    #[test]
    fn enum_is_emitted_on_any_kind() {
        assert_eq!(
            Prop::number().one_of(&["1"]).to_json().to_json_string(),
            r#"{"type":"number","enum":["1"]}"#
        );
    }

    #[test]
    fn never_additional_properties() {
        let text = schema(vec![Param::new(
            "o",
            Prop::object_with(vec![Param::new("x", Prop::object())]),
        )]);
        assert!(!text.contains("additionalProperties"), "{text}");
    }
}
