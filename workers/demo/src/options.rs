//! Worker options as the code declares them: type, default, bounds, choices and a sentence for people. These
//! declarations are the one source of that information: `describe` reports them (`"declared"`), the command
//! line is checked against them (a value out of bounds fails loudly), and a worker reads an option it was not
//! given as its declared default.

use std::collections::BTreeMap;

use serde_json::{Map, Value as Json, json};

use crate::invocation::usage;

/// The type of an option's value, which decides how its text is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A whole number.
    Integer,
    /// Any number.
    Number,
    /// `true` or `false`.
    Boolean,
    /// Any text, kept verbatim.
    Text,
}

impl Kind {
    /// The protocol's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            Self::Integer => "integer",
            Self::Number => "number",
            Self::Boolean => "boolean",
            Self::Text => "string",
        }
    }
}

/// A value written in a declaration (a default, a bound or a choice); no text option has a default yet.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Literal {
    /// A whole number.
    Integer(i64),
    /// Any number.
    Number(f64),
    /// `true` or `false`.
    Boolean(bool),
}

impl Literal {
    fn json(self) -> Json {
        match self {
            Self::Integer(v) => json!(v),
            Self::Number(v) => json!(v),
            Self::Boolean(v) => json!(v),
        }
    }

    fn value(self) -> Value {
        match self {
            Self::Integer(v) => Value::Integer(v),
            Self::Number(v) => Value::Number(v),
            Self::Boolean(v) => Value::Boolean(v),
        }
    }

    fn as_f64(self) -> Option<f64> {
        match self {
            Self::Integer(v) => Some(v as f64),
            Self::Number(v) => Some(v),
            Self::Boolean(_) => None,
        }
    }
}

/// One option a worker accepts, with everything the code knows about it.
#[derive(Debug, Clone, Copy)]
pub struct OptionSpec {
    /// The option's name (`--name value`).
    pub name: &'static str,
    /// Its type.
    pub kind: Kind,
    /// The value used when it is not given.
    pub default: Option<Literal>,
    /// The only values allowed, when it is a choice.
    pub choices: &'static [Literal],
    /// The smallest value allowed.
    pub minimum: Option<Literal>,
    /// The largest value allowed.
    pub maximum: Option<Literal>,
    /// A sentence for people.
    pub description: Option<&'static str>,
}

impl OptionSpec {
    /// An option of `kind` with nothing else declared.
    pub const fn new(name: &'static str, kind: Kind) -> Self {
        Self { name, kind, default: None, choices: &[], minimum: None, maximum: None, description: None }
    }

    /// A whole-number option.
    pub const fn integer(name: &'static str) -> Self {
        Self::new(name, Kind::Integer)
    }

    /// A number option.
    pub const fn number(name: &'static str) -> Self {
        Self::new(name, Kind::Number)
    }

    /// A boolean option.
    pub const fn boolean(name: &'static str) -> Self {
        Self::new(name, Kind::Boolean)
    }

    /// A text option.
    pub const fn text(name: &'static str) -> Self {
        Self::new(name, Kind::Text)
    }

    /// With a default.
    pub const fn default(mut self, value: Literal) -> Self {
        self.default = Some(value);
        self
    }

    /// With bounds, both inclusive (`None` for no bound on that side).
    pub const fn range(mut self, minimum: Option<Literal>, maximum: Option<Literal>) -> Self {
        self.minimum = minimum;
        self.maximum = maximum;
        self
    }

    /// With a closed list of allowed values.
    pub const fn choices(mut self, choices: &'static [Literal]) -> Self {
        self.choices = choices;
        self
    }

    /// With a sentence for people.
    pub const fn about(mut self, description: &'static str) -> Self {
        self.description = Some(description);
        self
    }

    /// The declaration as `describe` reports it; keys without a value are left out.
    pub fn declared(&self) -> Json {
        let mut object = Map::new();
        object.insert("name".into(), json!(self.name));
        object.insert("type".into(), json!(self.kind.name()));
        if let Some(default) = self.default {
            object.insert("default".into(), default.json());
        }
        if !self.choices.is_empty() {
            object.insert("choices".into(), self.choices.iter().map(|c| c.json()).collect());
        }
        if let Some(minimum) = self.minimum {
            object.insert("minimum".into(), minimum.json());
        }
        if let Some(maximum) = self.maximum {
            object.insert("maximum".into(), maximum.json());
        }
        if let Some(description) = self.description {
            object.insert("description".into(), json!(description));
        }
        Json::Object(object)
    }

    /// Reads the command-line text of this option for `worker`, checking its type, bounds and choices.
    pub fn read(&self, worker: &str, text: &str) -> anyhow::Result<Value> {
        let name = self.name;
        let bad = |noun: String| usage(format!("option {name:?} of worker {worker:?} must be {noun}, not {text:?}."));
        let value = match self.kind {
            Kind::Integer => text.trim().parse().map(Value::Integer).map_err(|_| bad("a whole number".into()))?,
            Kind::Number => text.trim().parse().map(Value::Number).map_err(|_| bad("a number".into()))?,
            Kind::Boolean => match text.trim() {
                "true" => Value::Boolean(true),
                "false" => Value::Boolean(false),
                _ => return Err(bad("true or false".into())),
            },
            Kind::Text => Value::Text(text.to_owned()),
        };
        if !self.choices.is_empty() && !self.choices.iter().any(|c| c.value() == value) {
            let listed: Vec<String> = self.choices.iter().map(|c| c.json().to_string()).collect();
            return Err(bad(format!("one of {}", listed.join(", "))));
        }
        let number = value.as_f64();
        if let (Some(v), Some(min)) = (number, self.minimum.and_then(Literal::as_f64))
            && v < min
        {
            return Err(bad(format!("at least {}", self.minimum.map(Literal::json).unwrap_or_default())));
        }
        if let (Some(v), Some(max)) = (number, self.maximum.and_then(Literal::as_f64))
            && v > max
        {
            return Err(bad(format!("at most {}", self.maximum.map(Literal::json).unwrap_or_default())));
        }
        Ok(value)
    }
}

/// The `declared.options` array of `describe`.
pub fn declared(specs: &[OptionSpec]) -> Json {
    specs.iter().map(OptionSpec::declared).collect()
}

/// A parsed option value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// From [`Kind::Integer`].
    Integer(i64),
    /// From [`Kind::Number`].
    Number(f64),
    /// From [`Kind::Boolean`].
    Boolean(bool),
    /// From [`Kind::Text`].
    Text(String),
}

impl Value {
    fn as_f64(&self) -> Option<f64> {
        match self {
            Self::Integer(v) => Some(*v as f64),
            Self::Number(v) => Some(*v),
            Self::Boolean(_) | Self::Text(_) => None,
        }
    }
}

/// The option values of one execution: those given on the command line, and for the rest the declared
/// defaults. An option with neither reads as zero, `false` or empty text, which each declaration's sentence
/// gives a meaning (`limit`: 0 means all).
#[derive(Debug, Clone)]
pub struct Options {
    given: BTreeMap<&'static str, Value>,
    specs: &'static [OptionSpec],
}

impl Options {
    /// No option given yet, for a worker declaring `specs`.
    pub fn new(specs: &'static [OptionSpec]) -> Self {
        Self { given: BTreeMap::new(), specs }
    }

    /// Records the value given for `spec`.
    pub fn give(&mut self, spec: &'static OptionSpec, value: Value) {
        self.given.insert(spec.name, value);
    }

    fn get(&self, name: &str) -> Option<Value> {
        let spec = self.specs.iter().find(|s| s.name == name);
        // Reading an undeclared option is a mistake in this program, not in the command line.
        debug_assert!(spec.is_some(), "the option {name:?} is not declared");
        self.given.get(name).cloned().or_else(|| spec?.default.map(Literal::value))
    }

    /// The whole number `name`.
    pub fn integer(&self, name: &str) -> i64 {
        match self.get(name) {
            Some(Value::Integer(v)) => v,
            _ => 0,
        }
    }

    /// The number `name`.
    pub fn number(&self, name: &str) -> f64 {
        self.get(name).and_then(|v| v.as_f64()).unwrap_or(0.0)
    }

    /// The boolean `name`.
    pub fn boolean(&self, name: &str) -> bool {
        matches!(self.get(name), Some(Value::Boolean(true)))
    }

    /// The text `name`.
    pub fn text(&self, name: &str) -> String {
        match self.get(name) {
            Some(Value::Text(v)) => v,
            _ => String::new(),
        }
    }

    /// The whole number `name` as a count (a negative value, which the bounds normally exclude, is 0).
    pub fn count(&self, name: &str) -> usize {
        usize::try_from(self.integer(name)).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPECS: &[OptionSpec] = &[
        OptionSpec::integer("batch_size")
            .default(Literal::Integer(10))
            .range(Some(Literal::Integer(1)), Some(Literal::Integer(1000)))
            .about("Documents per batch."),
        OptionSpec::integer("max_tags").default(Literal::Integer(5)).choices(&[
            Literal::Integer(3),
            Literal::Integer(5),
            Literal::Integer(8),
        ]),
        OptionSpec::number("threshold").range(Some(Literal::Number(0.0)), Some(Literal::Number(1.0))),
        OptionSpec::text("note"),
    ];

    fn message(result: anyhow::Result<Value>) -> String {
        result.err().map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn a_declaration_reports_only_what_it_declares() {
        assert_eq!(
            SPECS[0].declared(),
            json!({"name": "batch_size", "type": "integer", "default": 10, "minimum": 1, "maximum": 1000,
                   "description": "Documents per batch."})
        );
        assert_eq!(
            SPECS[1].declared(),
            json!({"name": "max_tags", "type": "integer", "default": 5, "choices": [3, 5, 8]})
        );
        assert_eq!(SPECS[3].declared(), json!({"name": "note", "type": "string"}));
    }

    #[test]
    fn values_are_checked_against_bounds_and_choices() {
        assert_eq!(SPECS[0].read("w", "1000").expect("in bounds"), Value::Integer(1000));
        assert!(message(SPECS[0].read("w", "0")).contains("must be at least 1, not \"0\""));
        assert!(message(SPECS[0].read("w", "1001")).contains("at most 1000"));
        assert!(message(SPECS[1].read("w", "4")).contains("one of 3, 5, 8"));
        assert!(message(SPECS[2].read("w", "1.5")).contains("at most 1.0"));
        assert_eq!(SPECS[2].read("w", "0.25").expect("a number"), Value::Number(0.25));
    }

    #[test]
    fn missing_options_read_as_their_default_or_zero() {
        let mut options = Options::new(SPECS);
        assert_eq!(options.integer("batch_size"), 10);
        assert_eq!(options.number("threshold"), 0.0);
        assert_eq!(options.text("note"), "");
        options.give(&SPECS[0], Value::Integer(3));
        assert_eq!(options.count("batch_size"), 3);
    }
}
