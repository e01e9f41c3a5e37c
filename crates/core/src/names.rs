//! Kubernetes name rules the pod needs checked before the API server sees them: label keys
//! and values, env names, DNS labels. Each check returns the reason a value is invalid, in
//! the API server's wording where it has one, so messages stay actionable.

/// Longest DNS-1123 label (hostnames, container names, label names).
const DNS1123_LABEL_MAX: usize = 63;
/// Longest DNS-1123 subdomain (label key prefixes).
const DNS1123_SUBDOMAIN_MAX: usize = 253;
/// Longest label name part and label value.
const LABEL_MAX: usize = 63;

/// Hex digits of the hash that stands for the cut part of a long name.
const HASH_DIGITS: usize = 10;

/// A stable 64-bit hash (FNV-1a) of `bytes`: the same input gives the same value in every
/// process and release, so names and versions derived from it stay put.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// `name` cut to `max` characters with a hash of the whole name at the end, so that names
/// alike in their first characters stay apart. `name` is ASCII (an object name).
fn shortened(name: &str, max: usize) -> String {
    let hash = format!("{:016x}", fnv1a64(name.as_bytes()));
    let keep = max - HASH_DIGITS - 1;
    let head = name.get(..keep).unwrap_or(name);
    // The head must end the way a label value may continue: `-`/`.`/`_` may stand inside.
    format!("{head}-{}", &hash[..HASH_DIGITS])
}

/// The label value that stands for an object name: the name itself when it is a valid label
/// value, else its first characters and a hash of the whole name (a custom resource's name
/// may have up to 253 characters, a label value 63).
pub fn label_value_for(name: &str) -> String {
    if check_label_value(name).is_ok() {
        return name.to_string();
    }
    let kept: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .collect();
    shortened(
        kept.trim_start_matches(|c: char| !c.is_ascii_alphanumeric()),
        LABEL_MAX,
    )
}

/// The pod hostname that stands for an object name (a DNS-1123 subdomain): the name when it
/// is a DNS label, else the name with dots as dashes, shortened like [`label_value_for`]
/// when it is longer than a label. `None` for a name no hostname can be made of.
pub fn hostname_for(name: &str) -> Option<String> {
    if is_dns1123_label(name) {
        return Some(name.to_string());
    }
    let dashed: String = name
        .chars()
        .map(|c| {
            if c == '.' {
                '-'
            } else {
                c.to_ascii_lowercase()
            }
        })
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    let dashed = dashed.trim_matches('-');
    let hostname = if dashed.len() > DNS1123_LABEL_MAX {
        shortened(dashed, DNS1123_LABEL_MAX)
    } else {
        dashed.to_string()
    };
    is_dns1123_label(&hostname).then_some(hostname)
}

/// Whether `s` is a DNS-1123 label: at most 63 of `a-z`, `0-9`, `-`, alphanumeric at both ends.
pub fn is_dns1123_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && bytes.len() <= DNS1123_LABEL_MAX
        && bytes.iter().all(|b| alnum(b) || *b == b'-')
        && bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
}

/// Whether `s` is a DNS-1123 subdomain: dot-separated DNS labels, at most 253 characters.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= DNS1123_SUBDOMAIN_MAX && s.split('.').all(is_dns1123_label)
}

/// Checks a label key: an optional DNS subdomain prefix and `/`, then a name of at most 63
/// alphanumerics, `-`, `_`, `.`, alphanumeric at both ends.
pub fn check_label_key(key: &str) -> Result<(), &'static str> {
    let name = match key.split_once('/') {
        None => key,
        Some((prefix, name)) => {
            if name.contains('/') {
                return Err("a label key may contain at most one '/'");
            }
            if !is_dns1123_subdomain(prefix) {
                return Err(
                    "the prefix before '/' must be a lowercase DNS subdomain (e.g. example.com) of at most 253 characters",
                );
            }
            name
        }
    };
    if name.is_empty() {
        return Err("the name part must not be empty");
    }
    if name.len() > LABEL_MAX {
        return Err("the name part must be at most 63 characters");
    }
    if !is_qualified_name(name) {
        return Err(
            "the name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
        );
    }
    Ok(())
}

/// Checks a label value: empty, or at most 63 alphanumerics, `-`, `_`, `.`, alphanumeric at
/// both ends.
pub fn check_label_value(value: &str) -> Result<(), &'static str> {
    if value.len() > LABEL_MAX {
        return Err("a label value must be at most 63 characters");
    }
    if !value.is_empty() && !is_qualified_name(value) {
        return Err(
            "a label value must be empty or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
        );
    }
    Ok(())
}

/// Checks an environment variable name the way every supported Kubernetes version accepts
/// it: `[-._a-zA-Z][-._a-zA-Z0-9]*`, and not `.`, `..` or starting with `..`.
pub fn check_env_name(name: &str) -> Result<(), &'static str> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
    let valid =
        name.chars().all(allowed) && name.chars().next().is_some_and(|c| !c.is_ascii_digit());
    if !valid {
        return Err(
            "an env name must consist of letters, digits, '_', '-' or '.', and must not start with a digit",
        );
    }
    if name == "." || name.starts_with("..") {
        return Err("an env name must not be '.' or start with '..'");
    }
    Ok(())
}

fn is_qualified_name(s: &str) -> bool {
    let bytes = s.as_bytes();
    bytes
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels() {
        assert!(is_dns1123_label("chrome-139-0-abc"));
        assert!(is_dns1123_label(&"a".repeat(63)));
        assert!(!is_dns1123_label(&"a".repeat(64)));
        assert!(!is_dns1123_label(""));
        assert!(!is_dns1123_label("Chrome"));
        assert!(!is_dns1123_label("-chrome"));
        assert!(!is_dns1123_label("chrome-"));
        assert!(!is_dns1123_label("chrome.1"));
    }

    #[test]
    fn dns_subdomains() {
        assert!(is_dns1123_subdomain("example.com"));
        assert!(is_dns1123_subdomain("a"));
        assert!(!is_dns1123_subdomain(""));
        assert!(!is_dns1123_subdomain("example..com"));
        assert!(!is_dns1123_subdomain("Example.com"));
        let long = vec!["a".repeat(63); 4].join(".");
        assert_eq!(long.len(), 255);
        assert!(!is_dns1123_subdomain(&long));
    }

    #[test]
    fn label_keys() {
        assert_eq!(check_label_key("team"), Ok(()));
        assert_eq!(check_label_key("example.com/Team_1.a"), Ok(()));
        assert!(check_label_key("").is_err());
        assert!(check_label_key("example.com/").is_err());
        assert!(check_label_key("/team").is_err());
        assert!(check_label_key("a/b/c").is_err());
        assert!(check_label_key("Example.com/team").is_err());
        assert!(check_label_key("team-").is_err());
        assert!(check_label_key("te am").is_err());
        assert!(check_label_key(&"a".repeat(64)).is_err());
        assert_eq!(check_label_key(&"a".repeat(63)), Ok(()));
    }

    #[test]
    fn label_values() {
        assert_eq!(check_label_value(""), Ok(()));
        assert_eq!(check_label_value("139.0"), Ok(()));
        assert_eq!(check_label_value("Checkout_Team-1"), Ok(()));
        assert!(check_label_value("-x").is_err());
        assert!(check_label_value("a b").is_err());
        assert!(check_label_value(&"a".repeat(64)).is_err());
    }

    #[test]
    fn long_names_get_label_values_and_hostnames_that_fit() {
        let long = format!("chrome-139-0-{}", "a".repeat(240));
        assert_eq!(long.len(), 253);
        let value = label_value_for(&long);
        assert_eq!(value.len(), 63);
        assert_eq!(check_label_value(&value), Ok(()));
        assert!(value.starts_with("chrome-139-0-aaaa"), "{value}");
        // Names alike in their first 52 characters stay apart.
        let other = format!("chrome-139-0-{}b", "a".repeat(239));
        assert_ne!(label_value_for(&other), value);
        assert_eq!(label_value_for(&long), value, "stable");
        // A name that fits is its own value.
        assert_eq!(label_value_for("chrome-139-0-abc"), "chrome-139-0-abc");
        assert_eq!(label_value_for(&"a".repeat(63)), "a".repeat(63));
        let dotted_64 = format!("{}.{}", "a".repeat(31), "b".repeat(32));
        let value = label_value_for(&dotted_64);
        assert_eq!(value.len(), 63);
        assert_eq!(check_label_value(&value), Ok(()));
        // The cut may end on a dot or a dash: still a valid value.
        let cut_at_dot = format!("{}.{}", "a".repeat(51), "b".repeat(60));
        assert_eq!(check_label_value(&label_value_for(&cut_at_dot)), Ok(()));

        let hostname = hostname_for(&long).unwrap();
        assert_eq!(hostname.len(), 63);
        assert!(is_dns1123_label(&hostname));
        assert_eq!(
            hostname_for("chrome-139-0-abc").as_deref(),
            Some("chrome-139-0-abc")
        );
        assert_eq!(
            hostname_for("chrome.139.0").as_deref(),
            Some("chrome-139-0")
        );
        assert!(is_dns1123_label(&hostname_for(&cut_at_dot).unwrap()));
        assert_eq!(hostname_for("..."), None);
    }

    #[test]
    fn fnv1a64_is_the_published_function() {
        // Test vectors of the FNV specification.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn env_names() {
        assert_eq!(check_env_name("TZ"), Ok(()));
        assert_eq!(check_env_name("my.env-name"), Ok(()));
        assert_eq!(check_env_name("_X1"), Ok(()));
        assert!(check_env_name("").is_err());
        assert!(check_env_name("1X").is_err());
        assert!(check_env_name("A=B").is_err());
        assert!(check_env_name("A B").is_err());
        assert!(check_env_name(".").is_err());
        assert!(check_env_name("..").is_err());
        assert!(check_env_name("..x").is_err());
        assert_eq!(check_env_name(".x"), Ok(()));
    }
}
