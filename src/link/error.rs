//! API client errors as people read them: the server's message, HTTP code and reason instead
//! of the client's debug dump of the Status, and for a failed connection the causes down to
//! the one that says what happened (`Connection refused`, a certificate problem).

use std::error::Error as _;
use std::fmt;

/// Display of a [`kube::Error`] for messages and logs.
pub struct Described<'a>(&'a kube::Error);

/// The error as one line: `message (code reason)` for an answer of the API server, the chain
/// of causes otherwise.
pub fn describe(error: &kube::Error) -> Described<'_> {
    Described(error)
}

/// Whether the request did not get an answer from the API server at all (no connection, TLS
/// failure, timeout): then the server's address is what the reader needs.
pub fn is_transport(error: &kube::Error) -> bool {
    matches!(error, kube::Error::HyperError(_) | kube::Error::Service(_))
}

impl fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (mut text, mut cause) = match self.0 {
            kube::Error::Api(status) => {
                let answer = match (status.code, status.reason.as_str()) {
                    (0, "") => "no code".to_string(),
                    (0, reason) => reason.to_string(),
                    (code, "") => code.to_string(),
                    (code, reason) => format!("{code} {reason}"),
                };
                return if status.message.is_empty() {
                    write!(f, "the API server answered {answer}")
                } else {
                    write!(f, "{} ({answer})", status.message)
                };
            }
            // The client's own prefixes (`HyperError: `, `ServiceError: `) tell the reader nothing.
            kube::Error::HyperError(e) => (e.to_string(), e.source()),
            kube::Error::Service(e) => (e.to_string(), e.source()),
            other => (other.to_string(), other.source()),
        };
        while let Some(e) = cause {
            let line = e.to_string();
            if !text.contains(&line) {
                text.push_str(": ");
                text.push_str(&line);
            }
            cause = e.source();
        }
        f.write_str(&text)
    }
}

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::*;

    #[test]
    fn an_api_error_is_the_servers_message_code_and_reason() {
        let status = Status::failure(
            "browsers.selenosis.io is forbidden: User \"x\" cannot list resource \"browsers\"",
            "Forbidden",
        )
        .with_code(403);
        let text = describe(&kube::Error::Api(Box::new(status))).to_string();
        assert_eq!(
            text,
            "browsers.selenosis.io is forbidden: User \"x\" cannot list resource \"browsers\" (403 Forbidden)"
        );
        let bare = Status::failure("", "").with_code(500);
        assert_eq!(
            describe(&kube::Error::Api(Box::new(bare))).to_string(),
            "the API server answered 500"
        );
    }

    #[derive(Debug, thiserror::Error)]
    #[error("client error (Connect)")]
    struct Connect(#[source] std::io::Error);

    #[test]
    fn a_transport_error_names_its_causes_once_without_the_clients_prefix() {
        let refused =
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
        let error = kube::Error::Service(Box::new(Connect(refused)));
        assert!(is_transport(&error));
        assert_eq!(
            describe(&error).to_string(),
            "client error (Connect): Connection refused"
        );
        let api = kube::Error::Api(Box::new(Status::failure("gone", "Gone").with_code(410)));
        assert!(!is_transport(&api));
    }
}
