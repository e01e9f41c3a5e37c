use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use browser_controller::api::crd::{self, Layout};
use browser_controller::cli::{CheckArgs, Cli, Command, CrdsArgs, RunArgs};
use browser_controller::{check, commands, logging, operator};

/// mimalloc instead of the C library's allocator: the static image links musl, whose malloc
/// costs several times the CPU per Browser under the operator's many small, short-lived
/// allocations. Here in the binary only, so tests and benchmarks keep their own.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` of mimalloc.h (the same in v2 and v3), which the bindings leave out.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// mimalloc v3 gives freed memory back to the system a second after it is freed: a restart,
/// which reconciles thousands of Browsers within that second, then peaks 20 MiB above what
/// it holds. 10 ms, v2's delay, keeps the peak near the live heap (docs/performance.md).
const PURGE_DELAY_MS: std::os::raw::c_long = 10;

/// Sets the purge delay, unless the environment chose one (`MIMALLOC_PURGE_DELAY`).
fn tune_allocator() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: sets one process-wide option of the allocator, which it reads at each purge.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
}

fn print_crds(args: &CrdsArgs) -> ExitCode {
    let layout = if args.split_groups {
        Layout::SplitGroups
    } else {
        Layout::Default
    };
    let features = match args.kubernetes_version {
        Some(version) => crd::Features::for_version(version),
        None => Ok(crd::Features::PORTABLE),
    };
    let written = features
        .and_then(|features| crd::to_yaml(layout, features))
        .map_err(|e| e.to_string())
        .and_then(|text| {
            std::io::stdout()
                .write_all(text.as_bytes())
                .map_err(|e| format!("cannot write to stdout: {e}"))
        });
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("browser-controller: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run_operator(args: RunArgs) -> ExitCode {
    if let Err(e) = logging::init(args.log_format, &args.log_level) {
        eprintln!("browser-controller: {e}");
        return ExitCode::FAILURE;
    }
    let format = args.log_format;
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            logging::fatal(format, &format!("cannot start the async runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(operator::run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            logging::fatal(format, &e);
            ExitCode::FAILURE
        }
    }
}

fn run_check(args: &CheckArgs) -> ExitCode {
    // Warnings only (the kube client's); the report itself goes to stdout.
    if let Err(e) = logging::init(args.run.log_format, "warn") {
        eprintln!("browser-controller check: {e}");
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("browser-controller check: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let report = runtime.block_on(check::run(args));
    print!("{report}");
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn main() -> ExitCode {
    tune_allocator();
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Render(args)) => match commands::render(&args) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("browser-controller render: {e}");
                ExitCode::FAILURE
            }
        },
        Some(Command::Crds(args)) => print_crds(&args),
        Some(Command::Check(args)) => run_check(&args),
        None => run_operator(cli.run),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_memory_goes_back_to_the_system_after_10_ms() {
        tune_allocator();
        // SAFETY: reads one option of the allocator.
        let delay = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(delay, PURGE_DELAY_MS);
    }
}
