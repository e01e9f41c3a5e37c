//! The operator's log: text or JSON lines on stderr, coloured only when stderr is a terminal
//! (`kubectl logs` and log collectors read a file or a pipe), a warning the kube client repeats
//! on every TLS connection shown once, and the one line of a fatal error.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry};

use crate::cli::LogFormat;

/// `--log-level` (or RUST_LOG) is not a valid filter.
#[derive(Debug, thiserror::Error)]
#[error("invalid --log-level: {0}")]
pub struct LogLevelError(String);

/// Where the kube client logs the certificate check it skips, once per TLS handshake, when the
/// kubeconfig sets `insecure-skip-tls-verify` (every watch and request is its own connection):
/// its TLS module, `kube_client::client::tls::rustls_tls` with the rustls backend.
const CERT_BYPASS_TARGET: &str = "kube_client::client::tls";
const CERT_BYPASS_MESSAGE: &str = "Server cert bypassed";

/// Drops every repetition of the kube client's certificate-bypass warning: the first one tells
/// all there is to know.
#[derive(Debug, Default)]
struct CertBypassOnce {
    seen: AtomicBool,
}

/// The `message` field of an event.
#[derive(Default)]
struct Message(String);

impl Visit for Message {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0 = value.to_string();
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl<S: Subscriber> Layer<S> for CertBypassOnce {
    fn event_enabled(&self, event: &Event<'_>, _ctx: Context<'_, S>) -> bool {
        if !event.metadata().target().starts_with(CERT_BYPASS_TARGET) {
            return true;
        }
        let mut message = Message::default();
        event.record(&mut message);
        message.0 != CERT_BYPASS_MESSAGE || !self.seen.swap(true, Ordering::Relaxed)
    }
}

/// The filter of `--log-level`; RUST_LOG wins when set.
fn filter(level: &str) -> Result<EnvFilter, LogLevelError> {
    match std::env::var("RUST_LOG") {
        Ok(env) if !env.is_empty() => EnvFilter::try_new(env),
        _ => EnvFilter::try_new(directives(level)),
    }
    .map_err(|e| LogLevelError(e.to_string()))
}

/// kube-runtime's controller opens an info span for every reconcile it starts
/// (`reconciling object`, its fields formatted), held while the reconcile waits for a worker:
/// at a restart over thousands of Browsers, thousands at once. The operator's own `reconcile`
/// span names the Browser, so at the default level kube-runtime's is left out; any other
/// filter is taken as it is.
const RECONCILE_SPANS: &str = "kube_runtime::controller=warn";

/// The filter directives of `--log-level`.
fn directives(level: &str) -> String {
    if level.trim().eq_ignore_ascii_case("info") {
        format!("info,{RECONCILE_SPANS}")
    } else {
        level.to_string()
    }
}

/// The subscriber writing to `writer`, with ANSI colours in text lines when `ansi`.
fn subscriber<W>(
    format: LogFormat,
    filter: EnvFilter,
    ansi: bool,
    writer: W,
) -> impl Subscriber + Send + Sync
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let base = tracing_subscriber::fmt::layer().with_writer(writer);
    let lines = match format {
        LogFormat::Json => base.json().boxed(),
        LogFormat::Text => base.with_ansi(ansi).boxed(),
    };
    Registry::default()
        .with(filter)
        .with(CertBypassOnce::default())
        .with(lines)
}

/// Sets up logging on stderr. A second call (tests) keeps the first subscriber.
pub fn init(format: LogFormat, level: &str) -> Result<(), LogLevelError> {
    let ansi = std::io::stderr().is_terminal();
    let _ = subscriber(format, filter(level)?, ansi, std::io::stderr).try_init();
    Ok(())
}

/// Reports the error that stops the process, once: a JSON log record when the log is JSON
/// (and not switched off), else `browser-controller: ` lines on stderr, one per line of the
/// error (one missing permission per line).
pub fn fatal(format: LogFormat, error: &dyn std::fmt::Display) {
    if format == LogFormat::Json && tracing::enabled!(tracing::Level::ERROR) {
        tracing::error!(error = %error, "operator stopped");
        return;
    }
    for line in error.to_string().lines() {
        eprintln!("browser-controller: {line}");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Everything the subscriber writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'w> MakeWriter<'w> for Captured {
        type Writer = Captured;

        fn make_writer(&'w self) -> Self::Writer {
            self.clone()
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    fn logged(format: LogFormat, ansi: bool, emit: impl FnOnce()) -> String {
        logged_at("info", format, ansi, emit)
    }

    fn logged_at(level: &str, format: LogFormat, ansi: bool, emit: impl FnOnce()) -> String {
        let out = Captured::default();
        let subscriber = subscriber(format, EnvFilter::new(directives(level)), ansi, out.clone());
        tracing::subscriber::with_default(subscriber, emit);
        out.text()
    }

    #[test]
    fn text_lines_have_no_colour_codes_unless_asked_for() {
        let emit = || tracing::info!(namespace = "team-a", "resolved kinds");
        let plain = logged(LogFormat::Text, false, emit);
        assert!(plain.contains("resolved kinds"), "{plain}");
        assert!(!plain.contains('\u{1b}'), "{plain:?}");
        let coloured = logged(LogFormat::Text, true, emit);
        assert!(coloured.contains('\u{1b}'), "{coloured:?}");
    }

    #[test]
    fn the_kube_clients_certificate_bypass_warning_is_shown_once() {
        let text = logged(LogFormat::Text, false, || {
            for _ in 0..7 {
                tracing::warn!(target: "kube_client::client::tls::rustls_tls", "Server cert bypassed");
            }
            tracing::warn!(target: "kube_client::client::tls", path = "/ca", "failed to reload CA bundle; keeping stale roots");
            tracing::warn!(target: "kube_client::client::tls", path = "/ca", "failed to reload CA bundle; keeping stale roots");
            tracing::warn!("Server cert bypassed");
        });
        assert_eq!(text.matches("Server cert bypassed").count(), 2, "{text}");
        assert_eq!(
            text.lines()
                .filter(|l| l.contains("kube_client::client::tls")
                    && l.contains("Server cert bypassed"))
                .count(),
            1,
            "{text}"
        );
        assert_eq!(text.matches("failed to reload CA bundle").count(), 2);
    }

    #[test]
    fn at_the_default_level_only_the_operators_own_reconcile_span_is_kept() {
        let emit = || {
            let outer = tracing::info_span!(target: "kube_runtime::controller", "reconciling object", object.reason = "object updated");
            let _outer = outer.enter();
            let inner = tracing::info_span!("reconcile", namespace = "team-a", name = "s1");
            let _inner = inner.enter();
            tracing::warn!("reconcile failed");
        };
        let info = logged_at("info", LogFormat::Text, false, emit);
        assert!(
            info.contains("reconcile{namespace=\"team-a\" name=\"s1\"}"),
            "{info}"
        );
        assert!(!info.contains("reconciling object"), "{info}");
        let debug = logged_at("debug", LogFormat::Text, false, emit);
        assert!(debug.contains("reconciling object"), "{debug}");
        let filtered = logged_at(
            "info,browser_controller=debug",
            LogFormat::Text,
            false,
            emit,
        );
        assert!(filtered.contains("reconciling object"), "{filtered}");
    }

    #[test]
    fn json_lines_are_json() {
        let text = logged(LogFormat::Json, true, || {
            tracing::info!(namespace = "team-a", "resolved kinds");
        });
        for line in text.lines() {
            serde_json::from_str::<serde_json::Value>(line).unwrap();
        }
        assert!(!text.contains('\u{1b}'), "{text:?}");
    }
}
