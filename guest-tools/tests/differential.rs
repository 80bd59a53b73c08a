//! Differential test of the validator against an independent JSON Schema implementation.
//!
//! Random parameter declarations in the crate's DSL (every kind, required flags, descriptions,
//! string enums including empty ones, defaults of any JSON value, nested properties and items up
//! to a bounded depth) are converted with `schema::to_json_schema`; random argument values,
//! biased to lie near the declaration so that accepts and rejects are both common, are checked by
//! `validate::validate` and by the `jsonschema` crate on the converted schema. The property:
//! the guest's violation list is empty exactly when the library accepts.
//!
//! The conversion names no `$schema` and uses only keywords whose meaning is the same in draft 7
//! and draft 2020-12 (`type`, `properties`, `required`, single-schema `items`, `enum`, and the
//! annotations `description` and `default`), so every case is checked under both drafts.
//!
//! Both sides see the same bytes: the schema and the value are printed as JSON text and each
//! side parses that text itself (the guest with `Json::parse`, the library with serde_json).
//!
//! CI runs 2000 cases. For the long run:
//!
//! ```text
//! DSH_PROPTEST_CASES=1000000 cargo test -p guest-tools --release --test differential -- --nocapture
//! ```
//!
//! which prints `checked N cases (A accepted, R rejected; ...)`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use guest_tools::json::Json;
use guest_tools::schema::{Kind, Param, Prop, to_json_schema};
use guest_tools::validate::validate;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::Value;

/// Declaration depth: objects and arrays nest at most this many levels below the arguments.
const MAX_DEPTH: u32 = 3;

/// Property names. Small, so that values' extra keys often collide with declared names; with
/// names that look like paths, JSON Schema keywords, escapes and non-ASCII.
const NAMES: &[&str] = &[
    "command",
    "description",
    "host",
    "port",
    "tags",
    "a",
    "b",
    "",
    "a.b",
    "x[0]",
    "type",
    "enum",
    "properties",
    "required",
    "$ref",
    "$id",
    "é",
    "\"q\"",
    "back\\slash",
    "\u{1}",
];

/// Strings for values and enum members: overlapping pools make enum hits and misses common.
const STRINGS: &[&str] = &[
    "red", "green", "blue", "", " ", "1", "true", "null", "Red", "é", "\u{0}", "\"", "\\", "a\nb",
];

/// Numbers that stress printing and parsing (all finite: JSON has no other numbers).
const NUMBERS: &[f64] = &[
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    -2.5,
    1e21,
    1e-7,
    9007199254740993.0,
    12345678901234567890.0,
    f64::MAX,
    f64::MIN_POSITIVE,
    5e-324,
];

// ---- declarations ------------------------------------------------------------------------------

fn string_from_pool() -> BoxedStrategy<String> {
    prop_oneof![
        4 => prop::sample::select(STRINGS).prop_map(str::to_string),
        1 => prop::collection::vec(any::<char>(), 0..4).prop_map(String::from_iter),
    ]
    .boxed()
}

fn name() -> BoxedStrategy<String> {
    prop_oneof![
        9 => prop::sample::select(NAMES).prop_map(str::to_string),
        1 => prop::collection::vec(any::<char>(), 0..3).prop_map(String::from_iter),
    ]
    .boxed()
}

fn kind(depth: u32) -> BoxedStrategy<Kind> {
    let leaf = prop_oneof![
        3 => Just(Kind::String),
        2 => Just(Kind::Number),
        2 => Just(Kind::Boolean),
        1 => Just(Kind::Object(None)),
        1 => Just(Kind::Array(None)),
    ];
    if depth == 0 {
        return leaf.boxed();
    }
    prop_oneof![
        4 => leaf,
        2 => params(depth - 1).prop_map(|p| Kind::Object(Some(p))),
        2 => prop(depth - 1).prop_map(|item| Kind::Array(Some(Box::new(item)))),
    ]
    .boxed()
}

/// One property. Enums on strings are common; on other kinds (where no value can be a member,
/// or where the contract does not check them at all) and empty enums are rarer.
fn prop(depth: u32) -> BoxedStrategy<Prop> {
    let enum_values =
        prop::collection::vec(prop::sample::select(STRINGS).prop_map(String::from), 0..4);
    (
        kind(depth),
        any::<bool>(),
        prop_oneof![3 => Just(String::new()), 1 => string_from_pool()],
        prop::option::weighted(0.5, enum_values),
        prop::option::weighted(0.2, json(1)),
        0..10u32,
    )
        .prop_map(
            |(kind, required, description, enum_values, default, roll)| {
                // Keep enums mostly on strings: elsewhere they make every value a reject.
                let enum_values = match kind {
                    Kind::String => enum_values,
                    _ if roll == 0 => enum_values,
                    _ => None,
                };
                Prop {
                    kind,
                    required,
                    description,
                    enum_values,
                    default,
                }
            },
        )
        .boxed()
}

/// An object's declared properties. Names are unique within one object: a declaration naming a
/// property twice has no faithful JSON Schema (an object holds one schema per key, and
/// `required` must not repeat a name), so such a declaration is not a valid input.
fn params(depth: u32) -> BoxedStrategy<Vec<Param>> {
    prop::collection::vec((name(), prop(depth)), 0..5)
        .prop_map(|pairs| {
            let mut out: Vec<Param> = Vec::new();
            for (name, prop) in pairs {
                if out.iter().all(|p| p.name != name) {
                    out.push(Param { name, prop });
                }
            }
            out
        })
        .boxed()
}

// ---- values ------------------------------------------------------------------------------------

fn number() -> BoxedStrategy<f64> {
    use prop::num::f64::{NEGATIVE, NORMAL, POSITIVE, SUBNORMAL, ZERO};
    prop_oneof![
        2 => prop::sample::select(NUMBERS),
        1 => (-1000i32..1000).prop_map(f64::from),
        1 => POSITIVE | NEGATIVE | NORMAL | SUBNORMAL | ZERO,
    ]
    .boxed()
}

/// Any JSON value, nested up to `depth` levels.
fn json(depth: u32) -> BoxedStrategy<Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        number().prop_map(Json::Number),
        string_from_pool().prop_map(Json::String),
    ];
    leaf.prop_recursive(depth, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Json::Array),
            prop::collection::vec((name(), inner), 0..3).prop_map(Json::Object),
        ]
    })
    .boxed()
}

/// A value for `prop`: right with probability `100 - wrong` percent at this level (its parts
/// deciding again), else any JSON value at all, which is often of the wrong kind.
fn value_near(prop: &Prop, wrong: u32) -> BoxedStrategy<Json> {
    let right = right_kind(prop, wrong);
    if wrong == 0 {
        return right;
    }
    prop_oneof![100 - wrong => right, wrong => json(1)].boxed()
}

/// A value of `prop`'s kind, whose parts are near their own declarations.
fn right_kind(prop: &Prop, wrong: u32) -> BoxedStrategy<Json> {
    match &prop.kind {
        Kind::String => match &prop.enum_values {
            Some(values) if !values.is_empty() => prop_oneof![
                3 => prop::sample::select(values.clone()).prop_map(Json::String),
                1 => string_from_pool().prop_map(Json::String),
            ]
            .boxed(),
            _ => string_from_pool().prop_map(Json::String).boxed(),
        },
        Kind::Number => number().prop_map(Json::Number).boxed(),
        Kind::Boolean => any::<bool>().prop_map(Json::Bool).boxed(),
        Kind::Object(None) => prop::collection::vec((name(), json(1)), 0..3)
            .prop_map(Json::Object)
            .boxed(),
        Kind::Object(Some(params)) => object_near(params, wrong),
        Kind::Array(None) => prop::collection::vec(json(1), 0..3)
            .prop_map(Json::Array)
            .boxed(),
        Kind::Array(Some(item)) => prop::collection::vec(value_near(item, wrong), 0..4)
            .prop_map(Json::Array)
            .boxed(),
    }
}

/// An object for `params`: each declared key present or absent (a required one is absent only
/// when this level goes wrong), each present value near its declaration, and extra keys before
/// and after. An extra key may repeat a declared name: the text then holds the key twice, and
/// both parsers keep the last value.
fn object_near(params: &[Param], wrong: u32) -> BoxedStrategy<Json> {
    let present_odds = |required: bool| match (required, wrong) {
        (true, 0) => 1.0,
        (true, _) => 1.0 - f64::from(wrong) / 200.0,
        (false, _) => 0.6,
    };
    let members: Vec<BoxedStrategy<Option<(String, Json)>>> = params
        .iter()
        .map(|param| {
            let name = param.name.clone();
            let value = value_near(&param.prop, wrong);
            let odds = present_odds(param.prop.required);
            // `weighted` wants a probability below 1.
            let value = if odds < 1.0 {
                prop::option::weighted(odds, value).boxed()
            } else {
                value.prop_map(Some).boxed()
            };
            value
                .prop_map(move |value| value.map(|value| (name.clone(), value)))
                .boxed()
        })
        .collect();
    let extras = || {
        prop::collection::vec((name(), json(1)), 0..2).prop_map(|pairs| {
            pairs
                .into_iter()
                .map(Some)
                .collect::<Vec<Option<(String, Json)>>>()
        })
    };
    (extras(), members, extras())
        .prop_map(|(before, members, after)| {
            Json::Object(
                before
                    .into_iter()
                    .chain(members)
                    .chain(after)
                    .flatten()
                    .collect(),
            )
        })
        .boxed()
}

/// The arguments for `params`: mostly an object near the declaration, sometimes anything.
fn arguments_near(params: &[Param], wrong: u32) -> BoxedStrategy<Json> {
    prop_oneof![
        19 => object_near(params, wrong),
        1 => json(2),
    ]
    .boxed()
}

/// A case: a declaration and arguments near it, with a per-case error rate (percent per level).
fn case() -> impl Strategy<Value = (Vec<Param>, Json)> {
    (
        params(MAX_DEPTH),
        prop::sample::select(&[0u32, 5, 15, 30, 50][..]),
    )
        .prop_flat_map(|(params, wrong)| {
            let args = arguments_near(&params, wrong);
            (Just(params), args)
        })
}

// ---- the comparison ----------------------------------------------------------------------------

/// Where the contract and JSON Schema disagree, and the contract wins (tool contract §1):
/// `enum` is emitted whenever present, on any kind, but it "applies to scalar kinds" only, so
/// the guest never checks an enum on an object or array property, while JSON Schema's `enum`
/// admits no object or array against a list of strings. The reference is given the schema
/// without those `enum`s, which is what the contract means by them. Returns how many it removed.
///
/// Only schema positions are walked (the root, `properties` members and `items`), never a
/// `default`, which is data.
fn drop_container_enums(schema: &mut Value) -> u64 {
    let Value::Object(map) = schema else {
        return 0;
    };
    let mut dropped = 0;
    let container = matches!(
        map.get("type").and_then(Value::as_str),
        Some("object" | "array")
    );
    if container && map.shift_remove("enum").is_some() {
        dropped += 1;
    }
    if let Some(Value::Object(properties)) = map.get_mut("properties") {
        for (_, sub) in properties.iter_mut() {
            dropped += drop_container_enums(sub);
        }
    }
    if let Some(items) = map.get_mut("items") {
        dropped += drop_container_enums(items);
    }
    dropped
}

static ACCEPTED: AtomicU64 = AtomicU64::new(0);
static REJECTED: AtomicU64 = AtomicU64::new(0);
static NOT_OBJECT: AtomicU64 = AtomicU64::new(0);
static MAPPED: AtomicU64 = AtomicU64::new(0);

fn check(params: &[Param], args: &Json) -> Result<(), TestCaseError> {
    let schema_text = to_json_schema(params).to_json_string();
    let args_text = args.to_json_string();

    // The guest's side, from the text.
    let parsed = Json::parse(&args_text).map_err(TestCaseError::fail)?;
    let violations = validate(params, &parsed);

    // The library's side, from the same text.
    let mut schema: Value = serde_json::from_str(&schema_text).map_err(|e| {
        TestCaseError::fail(format!("schema text does not parse: {e}: {schema_text}"))
    })?;
    let instance: Value = serde_json::from_str(&args_text).map_err(|e| {
        TestCaseError::fail(format!("argument text does not parse: {e}: {args_text}"))
    })?;
    let dropped = drop_container_enums(&mut schema);
    let draft2020 = jsonschema::draft202012::new(&schema).map_err(|e| {
        TestCaseError::fail(format!(
            "draft 2020-12 rejects the schema: {e}: {schema_text}"
        ))
    })?;
    let draft7 = jsonschema::draft7::new(&schema).map_err(|e| {
        TestCaseError::fail(format!("draft 7 rejects the schema: {e}: {schema_text}"))
    })?;
    let (valid2020, valid7) = (draft2020.is_valid(&instance), draft7.is_valid(&instance));

    let context = format!("schema: {schema_text}\nargs:   {args_text}\nguest:  {violations:?}");
    prop_assert_eq!(
        violations.is_empty(),
        valid2020,
        "draft 2020-12\n{}",
        context
    );
    prop_assert_eq!(violations.is_empty(), valid7, "draft 7\n{}", context);

    let counter = if valid2020 { &ACCEPTED } else { &REJECTED };
    counter.fetch_add(1, Ordering::Relaxed);
    if !matches!(parsed, Json::Object(_)) {
        NOT_OBJECT.fetch_add(1, Ordering::Relaxed);
    }
    if dropped > 0 {
        MAPPED.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

#[test]
fn differential_validator_matches_jsonschema() {
    let cases = match std::env::var("DSH_PROPTEST_CASES") {
        Ok(text) => text.parse().expect("DSH_PROPTEST_CASES must be a count"),
        Err(_) => 2000,
    };
    let mut runner = TestRunner::new(Config {
        cases,
        // A failure prints its shrunk case; nothing is written into the source tree.
        failure_persistence: None,
        ..Config::default()
    });
    let start = Instant::now();
    let result = runner.run(&case(), |(params, args)| check(&params, &args));
    let (accepted, rejected) = (
        ACCEPTED.load(Ordering::Relaxed),
        REJECTED.load(Ordering::Relaxed),
    );
    println!(
        "checked {} cases ({accepted} accepted, {rejected} rejected; {} non-object arguments, \
         {} with an enum on an object or array kind) in {:.1?}",
        accepted + rejected,
        NOT_OBJECT.load(Ordering::Relaxed),
        MAPPED.load(Ordering::Relaxed),
        start.elapsed(),
    );
    if let Err(e) = result {
        panic!("{e}");
    }
    // The generator must keep both outcomes common, or the comparison proves little.
    let total = accepted + rejected;
    assert!(
        accepted * 5 >= total && rejected * 5 >= total,
        "unbalanced: {accepted} accepted, {rejected} rejected"
    );
}

// ---- the documented discrepancy and the contract's special cases, pinned ---------------------------

fn library_accepts(schema: &Value, instance: &str) -> bool {
    let instance: Value = serde_json::from_str(instance).unwrap();
    let v2020 = jsonschema::draft202012::new(schema)
        .unwrap()
        .is_valid(&instance);
    assert_eq!(
        v2020,
        jsonschema::draft7::new(schema).unwrap().is_valid(&instance)
    );
    v2020
}

fn guest_accepts(params: &[Param], instance: &str) -> bool {
    validate(params, &Json::parse(instance).unwrap()).is_empty()
}

fn converted(params: &[Param]) -> Value {
    serde_json::from_str(&to_json_schema(params).to_json_string()).unwrap()
}

/// The one place the contract departs from JSON Schema, and why the comparison maps it.
#[test]
fn enum_on_an_object_or_array_kind_is_emitted_but_not_checked() {
    for prop in [Prop::object(), Prop::array()] {
        let params = vec![Param::new("o", prop.one_of(&["x"]))];
        let value = if params[0].prop.kind.type_name() == "object" {
            r#"{"o":{}}"#
        } else {
            r#"{"o":[]}"#
        };
        let mut schema = converted(&params);
        assert!(guest_accepts(&params, value));
        assert!(!library_accepts(&schema, value), "JSON Schema rejects it");
        assert_eq!(drop_container_enums(&mut schema), 1);
        assert!(
            library_accepts(&schema, value),
            "the mapped schema accepts it"
        );
    }
}

/// The contract's special cases that JSON Schema agrees with, unmapped.
#[test]
fn special_cases_agree_without_mapping() {
    let cases: Vec<(Vec<Param>, &str, bool)> = vec![
        // Arguments must be an object.
        (vec![], "[]", false),
        (vec![], "null", false),
        (vec![], "{}", true),
        // Any JSON number is a number, integral or not.
        (vec![Param::new("n", Prop::number())], r#"{"n":1}"#, true),
        (
            vec![Param::new("n", Prop::number())],
            r#"{"n":-2.5e300}"#,
            true,
        ),
        // Enum values are strings, so a number or boolean is never a member.
        (
            vec![Param::new("n", Prop::number().one_of(&["1"]))],
            r#"{"n":1}"#,
            false,
        ),
        (
            vec![Param::new("b", Prop::boolean().one_of(&["true"]))],
            r#"{"b":true}"#,
            false,
        ),
        // An empty enum admits nothing.
        (
            vec![Param::new("s", Prop::string().one_of(&[]))],
            r#"{"s":""}"#,
            false,
        ),
        (
            vec![Param::new("s", Prop::string().one_of(&[]))],
            r#"{}"#,
            true,
        ),
        // Extra keys are allowed; null is present, not missing.
        (
            vec![Param::new("s", Prop::string())],
            r#"{"t":1,"s":"x"}"#,
            true,
        ),
        (
            vec![Param::new("s", Prop::string())],
            r#"{"s":null}"#,
            false,
        ),
        // The last of duplicate keys counts, on both sides.
        (
            vec![Param::new("s", Prop::string())],
            r#"{"s":1,"s":"x"}"#,
            true,
        ),
        (
            vec![Param::new("s", Prop::string())],
            r#"{"s":"x","s":1}"#,
            false,
        ),
        // Defaults are never applied.
        (
            vec![Param::new(
                "n",
                Prop::number().required().default_value(Json::Number(1.0)),
            )],
            "{}",
            false,
        ),
    ];
    for (params, value, expected) in cases {
        let schema = converted(&params);
        assert_eq!(guest_accepts(&params, value), expected, "{value}");
        assert_eq!(
            library_accepts(&schema, value),
            expected,
            "{schema} {value}"
        );
    }
}
