//! Typed reads of a Browser held as untyped JSON (docs/behaviour.md, "Browser"): its name and
//! version, its phase and its failure reason. The object itself stays a `DynamicObject`, so
//! fields this operator does not know survive every write; only the few fields decisions read
//! are parsed, here, once.

use std::fmt;

use kube_core::{ApiResource, DynamicObject};
use serde_json::{Number, Value};

use crate::names;

/// A Browser phase (docs/behaviour.md, "Browser"); a Pod's phases have the same names.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub enum Phase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl Phase {
    /// The status field that holds the phase, in Browsers and Pods alike.
    pub const FIELD: &'static str = "phase";

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Running => "Running",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
            Self::Unknown => "Unknown",
        }
    }

    /// The phase of that name; `None` for any other text.
    pub fn parse(text: &str) -> Option<Self> {
        [
            Self::Pending,
            Self::Running,
            Self::Succeeded,
            Self::Failed,
            Self::Unknown,
        ]
        .into_iter()
        .find(|phase| phase.as_str() == text)
    }
}

/// A field of the Browser's spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecField {
    BrowserName,
    BrowserVersion,
}

impl SpecField {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::BrowserName => "browserName",
            Self::BrowserVersion => "browserVersion",
        }
    }
}

impl fmt::Display for SpecField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What is wrong with one spec field; the text is the one the Browser's status shows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldError {
    #[error("spec.{field} is missing")]
    Missing { field: SpecField },
    #[error("spec.{field} is empty")]
    Empty { field: SpecField },
    #[error("spec.{field} {value:?} is not a valid label value: {why}")]
    NotLabelValue {
        field: SpecField,
        value: String,
        why: &'static str,
    },
    // YAML reads `120.10` as the number 120.1: a converted number could silently name
    // another browser version, so it is refused with the fix.
    #[error(
        "spec.{field} must be a string, got the number {number}; quote it (\"{number}\") so it is read exactly as written"
    )]
    Number { field: SpecField, number: Number },
    #[error("spec.{field} must be a string, got {found}")]
    NotString {
        field: SpecField,
        found: &'static str,
    },
}

/// Why a Browser's spec names no browser: every field at fault, in spec order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid Browser spec: {}", join(.0))]
pub struct SpecError(pub Vec<FieldError>);

fn join(problems: &[FieldError]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The browser a Browser asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrowserKey<'a> {
    pub name: &'a str,
    pub version: &'a str,
}

/// A Browser's `spec`.
#[derive(Debug, Clone, Copy)]
pub struct BrowserSpec<'a>(&'a Value);

impl<'a> BrowserSpec<'a> {
    pub fn new(spec: &'a Value) -> Self {
        Self(spec)
    }

    /// Both fields as they must be (docs/behaviour.md, "Browser"), or all that is wrong.
    pub fn key(self) -> Result<BrowserKey<'a>, SpecError> {
        match (
            self.field(SpecField::BrowserName),
            self.field(SpecField::BrowserVersion),
        ) {
            (Ok(name), Ok(version)) => Ok(BrowserKey { name, version }),
            (name, version) => Err(SpecError(
                [name.err(), version.err()].into_iter().flatten().collect(),
            )),
        }
    }

    /// The field as it must be: a non-empty string that is a valid label value.
    pub fn field(self, field: SpecField) -> Result<&'a str, FieldError> {
        match self.0.get(field.as_str()) {
            None | Some(Value::Null) => Err(FieldError::Missing { field }),
            Some(Value::String(s)) if s.is_empty() => Err(FieldError::Empty { field }),
            Some(Value::String(s)) => {
                names::check_label_value(s)
                    .map(|()| s.as_str())
                    .map_err(|why| FieldError::NotLabelValue {
                        field,
                        value: s.clone(),
                        why,
                    })
            }
            Some(Value::Number(number)) => Err(FieldError::Number {
                field,
                number: number.clone(),
            }),
            Some(other) => Err(FieldError::NotString {
                field,
                found: json_type(other),
            }),
        }
    }

    /// The field as written, whatever string it is. For readers that must not judge it: the
    /// dry run of a BrowserConfig renders pods for its entry keys as they stand.
    pub fn as_written(self, field: SpecField) -> Option<&'a str> {
        self.0.get(field.as_str()).and_then(Value::as_str)
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// A Browser's `status` as it stands, read field by field: any client may have written it,
/// so it need not have the shape of [`crate::api::status::BrowserStatus`], the status the
/// operator writes.
#[derive(Debug, Clone, Copy)]
pub struct StatusView<'a>(&'a Value);

impl<'a> StatusView<'a> {
    pub fn new(status: &'a Value) -> Self {
        Self(status)
    }

    /// The phase, when it is one of the documented ones.
    pub fn phase(self) -> Option<Phase> {
        self.phase_as_written().and_then(Phase::parse)
    }

    /// The phase as written, when it is a string: also one another client made up.
    pub fn phase_as_written(self) -> Option<&'a str> {
        self.0.get(Phase::FIELD).and_then(Value::as_str)
    }

    /// The failure reason, when it is a string.
    pub fn reason(self) -> Option<&'a str> {
        self.0.get("reason").and_then(Value::as_str)
    }
}

/// A Browser that exists only to render the pod a dry run sends: `name` in `namespace`, asking
/// for `browser` `version`, with a UID no object has. `None` when the fields make no object.
pub fn for_dry_run(
    resource: &ApiResource,
    namespace: Option<&str>,
    name: &str,
    browser: &str,
    version: &str,
) -> Option<DynamicObject> {
    serde_json::from_value(serde_json::json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": "00000000-0000-0000-0000-000000000000",
        },
        "spec": {"browserName": browser, "browserVersion": version},
    }))
    .ok()
}

/// A Browser.
#[derive(Debug, Clone, Copy)]
pub struct Browser<'a>(&'a DynamicObject);

impl<'a> Browser<'a> {
    pub fn new(browser: &'a DynamicObject) -> Self {
        Self(browser)
    }

    /// The browser it asks for, or all that is wrong with its spec.
    pub fn spec(self) -> Result<BrowserKey<'a>, SpecError> {
        self.fields().key()
    }

    /// Its spec, field by field.
    pub fn fields(self) -> BrowserSpec<'a> {
        BrowserSpec::new(self.part("spec"))
    }

    pub fn status(self) -> StatusView<'a> {
        StatusView::new(self.part("status"))
    }

    pub fn phase(self) -> Option<Phase> {
        self.status().phase()
    }

    fn part(self, key: &str) -> &'a Value {
        self.0.data.get(key).unwrap_or(&Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn browser(data: Value) -> DynamicObject {
        let mut b: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "selenosis.io/v1", "kind": "Browser", "metadata": {"name": "s1"},
        }))
        .unwrap();
        b.data = data;
        b
    }

    #[test]
    fn phases_read_and_write_the_documented_names() {
        for phase in [
            Phase::Pending,
            Phase::Running,
            Phase::Succeeded,
            Phase::Failed,
            Phase::Unknown,
        ] {
            assert_eq!(Phase::parse(phase.as_str()), Some(phase));
        }
        assert_eq!(Phase::Running.as_str(), "Running");
        assert_eq!(Phase::parse("running"), None);
        assert_eq!(Phase::parse(""), None);
    }

    #[test]
    fn a_valid_spec_names_the_browser() {
        let b = browser(json!({"spec": {"browserName": "chrome", "browserVersion": "139.0"}}));
        assert_eq!(
            Browser::new(&b).spec(),
            Ok(BrowserKey {
                name: "chrome",
                version: "139.0"
            })
        );
    }

    #[test]
    fn each_bad_field_says_what_is_wrong_with_it() {
        let cases = [
            (json!(null), "spec.browserName is missing"),
            (json!(""), "spec.browserName is empty"),
            (
                json!(120.1),
                "spec.browserName must be a string, got the number 120.1; quote it (\"120.1\") so it is read exactly as written",
            ),
            (
                json!(true),
                "spec.browserName must be a string, got a boolean",
            ),
            (json!([]), "spec.browserName must be a string, got a list"),
            (
                json!({}),
                "spec.browserName must be a string, got an object",
            ),
        ];
        for (value, message) in cases {
            let spec = json!({"browserName": value});
            let error = BrowserSpec::new(&spec)
                .field(SpecField::BrowserName)
                .unwrap_err();
            assert_eq!(error.to_string(), message);
        }
        let spec = json!({"browserVersion": "1 2"});
        let error = BrowserSpec::new(&spec)
            .field(SpecField::BrowserVersion)
            .unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("spec.browserVersion \"1 2\" is not a valid label value: "),
            "{error}"
        );
    }

    #[test]
    fn a_bad_spec_lists_every_field_at_fault_as_the_status_shows_it() {
        let b = browser(json!({"spec": {"browserVersion": 120}}));
        let error = Browser::new(&b).spec().unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid Browser spec: spec.browserName is missing; spec.browserVersion must be a string, got the number 120; quote it (\"120\") so it is read exactly as written"
        );
        let b = browser(json!({}));
        assert_eq!(
            Browser::new(&b).spec().unwrap_err().to_string(),
            "invalid Browser spec: spec.browserName is missing; spec.browserVersion is missing"
        );
    }

    #[test]
    fn as_written_takes_any_string_and_nothing_else() {
        let spec = json!({"browserName": "a b", "browserVersion": 139});
        let spec = BrowserSpec::new(&spec);
        assert_eq!(spec.as_written(SpecField::BrowserName), Some("a b"));
        assert_eq!(spec.as_written(SpecField::BrowserVersion), None);
    }

    #[test]
    fn the_status_gives_its_phase_and_reason() {
        let b = browser(json!({"status": {"phase": "Failed", "reason": "PodLost"}}));
        let failed = Browser::new(&b);
        assert_eq!(failed.phase(), Some(Phase::Failed));
        assert_eq!(failed.status().reason(), Some("PodLost"));

        let made_up = json!({"phase": "Gone"});
        let status = StatusView::new(&made_up);
        assert_eq!(status.phase(), None);
        assert_eq!(status.phase_as_written(), Some("Gone"));

        let none = browser(json!({"spec": {}}));
        assert_eq!(Browser::new(&none).phase(), None);
        assert_eq!(Browser::new(&none).status().phase_as_written(), None);
    }
}
