//! An ordered JSON value with JavaScript's semantics.
//!
//! Why not `serde_json::Value`: its `Map` hashes with std's `RandomState`, which draws on the
//! platform's randomness (on `wasm32-wasip2`, an import of `wasi:random`) in a guest that must
//! stay deterministic and import nothing but its world, and it prints numbers the Rust way
//! (`1.0`). This type keeps object keys in insertion order (the schema's key order is part of
//! the contract), stores numbers as `f64` as `JSON.parse` does, and prints like `JSON.stringify`.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::jsnum;
use crate::json_tokens::number_tokens;

/// A JSON value. Objects keep their keys in insertion order.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    /// Every number is an `f64`, as in JavaScript.
    Number(f64),
    String(String),
    Array(Vec<Json>),
    /// Key/value pairs in insertion order. Parsed duplicates are all kept; lookups see the last.
    Object(Vec<(String, Json)>),
}

impl Json {
    /// Parse JSON text (`JSON.parse`). The error is serde_json's message.
    ///
    /// A number too large for an `f64` is valid JSON and `JSON.parse` reads it as ±Infinity;
    /// serde_json refuses it instead, so such text is parsed again with those numbers stood in for.
    pub fn parse(text: &str) -> Result<Json, String> {
        match serde_json::from_str(text) {
            Ok(value) => Ok(value),
            Err(e) if e.to_string().starts_with("number out of range") => {
                Self::parse_with_infinities(text)
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// Parses `text` whose out-of-range numbers are first replaced by `0` and padded with spaces
    /// (so error positions stay the same), then puts ±Infinity back at those numbers. Every number
    /// token becomes one `Number` in the same order as a pre-order walk, so the n-th token is the
    /// n-th number found walking the value.
    fn parse_with_infinities(text: &str) -> Result<Json, String> {
        let mut stood_in = text.as_bytes().to_vec();
        let mut infinities = Vec::new();
        for (ordinal, range) in number_tokens(text.as_bytes()).enumerate() {
            match text[range.clone()].parse::<f64>() {
                Ok(x) if x.is_infinite() => {
                    infinities.push((ordinal, x));
                    stood_in[range.clone()].fill(b' ');
                    stood_in[range.start] = b'0';
                }
                _ => {}
            }
        }
        // Only ASCII bytes of number tokens were replaced by ASCII bytes.
        let stood_in = String::from_utf8(stood_in).map_err(|e| e.to_string())?;
        let mut value: Json = serde_json::from_str(&stood_in).map_err(|e| e.to_string())?;
        let mut ordinal = 0;
        let mut pending = infinities.into_iter().peekable();
        value.visit_numbers(&mut |x| {
            if let Some((_, inf)) = pending.next_if(|(at, _)| *at == ordinal) {
                *x = inf;
            }
            ordinal += 1;
        });
        Ok(value)
    }

    /// Calls `f` on every number, in document order.
    fn visit_numbers(&mut self, f: &mut impl FnMut(&mut f64)) {
        match self {
            Json::Number(x) => f(x),
            Json::Array(items) => items.iter_mut().for_each(|item| item.visit_numbers(f)),
            Json::Object(pairs) => pairs.iter_mut().for_each(|(_, v)| v.visit_numbers(f)),
            Json::Null | Json::Bool(_) | Json::String(_) => {}
        }
    }

    /// The value of `key` in an object; the last one wins, as with `JSON.parse`.
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(pairs) => pairs.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Compact JSON text, as `JSON.stringify(value)` prints it.
    pub fn to_json_string(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Number(x) => out.push_str(&jsnum::to_js_json(*x)),
            Json::String(s) => write_string(s, out),
            Json::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write(out);
                }
                out.push(']');
            }
            Json::Object(pairs) => {
                out.push('{');
                for (i, (key, value)) in pairs.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_string(key, out);
                    out.push(':');
                    value.write(out);
                }
                out.push('}');
            }
        }
    }
}

/// A JSON string literal with `JSON.stringify`'s escapes.
fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Builds a [`Json`] straight from serde_json's parser, never through its `Map`.
struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Number(v as f64))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Number(v as f64))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Json, E> {
        Ok(Json::Number(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Json, E> {
        Ok(Json::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Json, E> {
        Ok(Json::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut pairs = Vec::new();
        while let Some((key, value)) = map.next_entry::<String, Json>()? {
            pairs.push((key, value));
        }
        Ok(Json::Object(pairs))
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Json, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(pairs: &[(&str, Json)]) -> Json {
        Json::Object(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        )
    }

    #[test]
    fn parses_every_kind() {
        let v = Json::parse(r#"{"b":[1,-2.5,true,null],"a":"x","c":{}}"#).unwrap();
        assert_eq!(
            v,
            obj(&[
                (
                    "b",
                    Json::Array(vec![
                        Json::Number(1.0),
                        Json::Number(-2.5),
                        Json::Bool(true),
                        Json::Null
                    ])
                ),
                ("a", Json::String("x".into())),
                ("c", Json::Object(vec![])),
            ])
        );
    }

    #[test]
    fn numbers_out_of_range_are_infinities_as_in_json_parse() {
        let v =
            Json::parse(r#"{"s":"1e400","a":[1e400,2,-1e999,1e308],"b":{"c":-9e999}}"#).unwrap();
        assert_eq!(v.get("s"), Some(&Json::String("1e400".into())));
        assert_eq!(
            v.get("a"),
            Some(&Json::Array(vec![
                Json::Number(f64::INFINITY),
                Json::Number(2.0),
                Json::Number(f64::NEG_INFINITY),
                Json::Number(1e308),
            ]))
        );
        assert_eq!(
            v.get("b").and_then(|b| b.get("c")),
            Some(&Json::Number(f64::NEG_INFINITY))
        );
        let digits = format!("[{}]", "9".repeat(400));
        assert_eq!(
            Json::parse(&digits).unwrap(),
            Json::Array(vec![Json::Number(f64::INFINITY)])
        );
        // Other errors keep their place in the text.
        assert_eq!(
            Json::parse("[1e400, x]").unwrap_err(),
            "expected value at line 1 column 9"
        );
    }

    #[test]
    fn keeps_key_order_when_printing() {
        let text = r#"{"z":1,"a":{"y":[],"b":null},"m":"s"}"#;
        assert_eq!(Json::parse(text).unwrap().to_json_string(), text);
    }

    #[test]
    fn last_duplicate_key_wins() {
        let v = Json::parse(r#"{"a":1,"a":2}"#).unwrap();
        assert_eq!(v.get("a"), Some(&Json::Number(2.0)));
        assert_eq!(v.get("b"), None);
        assert_eq!(Json::Null.get("a"), None);
    }

    #[test]
    fn prints_numbers_like_javascript() {
        let v = Json::parse("[1.0,-0,1e21,1e-7,0.5,120000]").unwrap();
        assert_eq!(v.to_json_string(), "[1,0,1e+21,1e-7,0.5,120000]");
        assert_eq!(Json::Number(f64::NAN).to_json_string(), "null");
    }

    #[test]
    fn escapes_strings_like_json_stringify() {
        let s = Json::String("a\"b\\c\n\t\r\u{8}\u{c}\u{1}\u{1f}é\u{2028}/".into());
        assert_eq!(
            s.to_json_string(),
            "\"a\\\"b\\\\c\\n\\t\\r\\b\\f\\u0001\\u001fé\u{2028}/\""
        );
    }

    #[test]
    fn numbers_are_doubles_as_in_javascript() {
        // Beyond 2^53 integers round like JSON.parse, and print like JSON.stringify.
        let v = Json::parse("[12345678901234567890,9007199254740993,-0]").unwrap();
        assert_eq!(
            v.to_json_string(),
            "[12345678901234567000,9007199254740992,0]"
        );
        // Correctly rounded parsing (serde_json's float_roundtrip).
        assert_eq!(
            Json::parse("2.2250738585072011e-308").unwrap(),
            Json::Number(2.225073858507201e-308)
        );
    }

    #[test]
    fn invalid_text_reports_serde_message() {
        assert_eq!(
            Json::parse("{").unwrap_err(),
            "EOF while parsing an object at line 1 column 1"
        );
        assert_eq!(
            Json::parse("[1] x").unwrap_err(),
            "trailing characters at line 1 column 5"
        );
    }
}
