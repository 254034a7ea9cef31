//! The vocabulary of the contract with the Python side: what one system puts in samples and
//! accepts in its config. A leaf module (serde only): every system builds its part here, and
//! `describe` (which imports the systems) assembles them, so no module loop runs through it.
//! Nothing here is a copy: each system passes the constants and default functions its own
//! code uses.

use std::collections::{BTreeMap, BTreeSet};

use serde::de::{self, DeserializeOwned, Visitor};
use serde::Serialize;
use serde_json::Value;

/// One config key a node reads: its type, default and bounds, as the node applies them.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Key {
    /// "int" | "float" | "str" | "bool" | "list" | "object".
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The node refuses a config without it.
    pub required: bool,
    /// The value used when the key is absent (null: none, the key is optional).
    pub default: Value,
    /// Inclusive bounds (a list's: its length), null when unbounded.
    pub min: Value,
    pub max: Value,
    /// `min` is exclusive (a rate or a timeout must be > 0).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub min_exclusive: bool,
    /// The allowed values of a string key.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<&'static str>,
    /// How a default of 0 (or absent) is derived from other keys, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub derived: Option<&'static str>,
    /// The role checks this key's bounds itself, with its own message (so `check` leaves it).
    #[serde(skip)]
    pub own_check: bool,
}

impl Key {
    fn of(kind: &'static str) -> Self {
        Key {
            kind,
            required: false,
            default: Value::Null,
            min: Value::Null,
            max: Value::Null,
            min_exclusive: false,
            choices: Vec::new(),
            derived: None,
            own_check: false,
        }
    }
    /// A number of `kind` ("int" | "float") from `min` up, to `max` (null: unbounded).
    fn number(kind: &'static str, min: Value, max: Value) -> Self {
        Key {
            min,
            max,
            ..Key::of(kind)
        }
    }
    /// An integer in `min..=max`.
    pub fn int(min: impl Into<Value>, max: impl Into<Value>) -> Self {
        Key::number("int", min.into(), max.into())
    }
    /// An integer from `min` up.
    pub fn int_from(min: impl Into<Value>) -> Self {
        Key::number("int", min.into(), Value::Null)
    }
    /// A number in `min..=max` (use `.above()` for an exclusive `min`).
    pub fn float(min: impl Into<Value>, max: impl Into<Value>) -> Self {
        Key::number("float", min.into(), max.into())
    }
    /// A number without an upper bound.
    pub fn float_from(min: impl Into<Value>) -> Self {
        Key::number("float", min.into(), Value::Null)
    }
    pub fn str() -> Self {
        Key::of("str")
    }
    pub fn one_of(choices: &[&'static str]) -> Self {
        Key {
            choices: choices.to_vec(),
            ..Key::of("str")
        }
    }
    pub fn bool() -> Self {
        Key::of("bool")
    }
    /// A list of at most `max_len` entries (None: unbounded).
    pub fn list(max_len: Option<usize>) -> Self {
        Key {
            max: max_len.map_or(Value::Null, Value::from),
            ..Key::of("list")
        }
    }
    pub fn object() -> Self {
        Key::of("object")
    }
    pub fn default(mut self, value: impl Serialize) -> Self {
        self.default = serde_json::to_value(value).unwrap_or(Value::Null);
        self
    }
    pub fn required(mut self) -> Self {
        self.required = true;
        self
    }
    /// `min` is exclusive.
    pub fn above(mut self) -> Self {
        self.min_exclusive = true;
        self
    }
    /// The role checks the bounds itself (its message names them its own way).
    pub fn checked(mut self) -> Self {
        self.own_check = true;
        self
    }
    pub fn derived(mut self, rule: &'static str) -> Self {
        self.derived = Some(rule);
        self
    }
}

impl Key {
    /// Refuses `value` when it is outside the bounds or the choices: what a node accepts is
    /// what it describes. The type is serde's to check.
    pub fn check(&self, key: &str, value: &Value) -> Result<(), String> {
        if self.own_check {
            return Ok(());
        }
        let outside = |what: String| Err(format!("{key}: {what}"));
        if let (Some(x), "int" | "float") = (value.as_f64(), self.kind) {
            if let Some(min) = self.min.as_f64() {
                if x < min || (self.min_exclusive && x == min) {
                    let op = if self.min_exclusive { ">" } else { ">=" };
                    return outside(format!("{x} is not {op} {}", self.min));
                }
            }
            if let Some(max) = self.max.as_f64() {
                if x > max {
                    return outside(format!("{x} is above {}", self.max));
                }
            }
        }
        if let (Some(list), Some(max)) = (value.as_array(), self.max.as_u64()) {
            if list.len() as u64 > max {
                return outside(format!("{} entries, at most {max}", list.len()));
            }
        }
        if let (Some(s), false) = (value.as_str(), self.choices.is_empty()) {
            if !self.choices.contains(&s) {
                return outside(format!("'{s}' is not one of {}", self.choices.join(", ")));
            }
        }
        Ok(())
    }
}

/// What one system (or the load generator) puts in samples and accepts in its config.
#[derive(Serialize, Default, Debug)]
pub struct SystemContract {
    /// Sample `op` codes by name (operations that are recorded).
    pub ops: BTreeMap<&'static str, u16>,
    /// Sample `flags` bits by name.
    pub flags: BTreeMap<&'static str, u16>,
    /// Fixed sizes in bytes by name.
    pub sizes: BTreeMap<&'static str, u64>,
    /// Sample `arg` codes by name, for a system whose `arg` is a code (http: the reason a
    /// request failed); absent for the others.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub args: BTreeMap<&'static str, u32>,
    /// What the generic sample columns hold in this system, by record field: the name the
    /// column is read as (`knee.results.point_frame` renames it) and its meaning.
    pub columns: BTreeMap<&'static str, Column>,
    /// Named numbers of its rules (e.g. how a derived default is computed).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub constants: BTreeMap<&'static str, Value>,
    /// Every config key its nodes read, by "section.name" (a nested key: "section.a.b").
    pub keys: BTreeMap<String, Key>,
    /// The fields serde reads of each config struct, by section (for the test that every one
    /// is described; not printed).
    #[serde(skip)]
    pub read: BTreeMap<&'static str, BTreeSet<&'static str>>,
}

/// A system's meaning of one record field.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Column {
    /// The column's name in the system's frames (the field's own name when unrenamed).
    pub name: &'static str,
    pub meaning: &'static str,
}

impl SystemContract {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn op(mut self, name: &'static str, code: u16) -> Self {
        self.ops.insert(name, code);
        self
    }
    pub fn flag(mut self, name: &'static str, bit: u16) -> Self {
        self.flags.insert(name, bit);
        self
    }
    pub fn arg(mut self, name: &'static str, code: u32) -> Self {
        self.args.insert(name, code);
        self
    }
    pub fn size(mut self, name: &'static str, bytes: usize) -> Self {
        self.sizes.insert(name, bytes as u64);
        self
    }
    pub fn constant(mut self, name: &'static str, value: impl Into<Value>) -> Self {
        self.constants.insert(name, value.into());
        self
    }
    /// Record field `field` holds `meaning` in this system, read as column `name`.
    pub fn column(mut self, field: &'static str, name: &'static str, meaning: &'static str) -> Self {
        self.columns.insert(field, Column { name, meaning });
        self
    }
    /// A config key ("section.name").
    pub fn key(mut self, key: &str, spec: Key) -> Self {
        self.keys.insert(key.to_string(), spec);
        self
    }
    /// The config struct `T` is read as `section` (e.g. "server", "driver",
    /// "load.schedule"): its serde fields are the keys that must be described there.
    pub fn reads<T: DeserializeOwned>(mut self, section: &'static str) -> Self {
        self.read.entry(section).or_default().extend(serde_fields::<T>());
        self
    }
}

impl SystemContract {
    /// Checks every described key of `section` present in `table` (the section's object).
    pub fn check(&self, section: &str, table: &Value) -> Result<(), String> {
        let Some(map) = table.as_object() else {
            return Ok(());
        };
        for (name, value) in map {
            let key = format!("{section}.{name}");
            if let Some(spec) = self.keys.get(&key) {
                spec.check(&key, value)?;
            }
        }
        Ok(())
    }

    /// The sections its keys are in ("server", "server.nginx", "driver", ...).
    pub fn sections(&self) -> BTreeSet<&str> {
        self.keys
            .keys()
            .filter_map(|k| k.rsplit_once('.').map(|(section, _)| section))
            .collect()
    }
}

/// The field names serde's derive gives a struct (`deserialize_struct`'s `fields`): probed
/// with a deserializer that records them and stops.
pub fn serde_fields<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut probe = Probe(&[]);
    let _ = T::deserialize(&mut probe);
    probe.0
}

struct Probe(&'static [&'static str]);

impl<'de> de::Deserializer<'de> for &mut Probe {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        self.0 = fields;
        Err(de::Error::custom("probed"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Two {
        a: u32,
        #[serde(rename = "bee")]
        b: Option<String>,
    }

    #[test]
    fn the_probe_reads_the_field_names_serde_reads() {
        assert_eq!(serde_fields::<Two>(), ["a", "bee"]);
        assert!(serde_fields::<u32>().is_empty());
    }
}
