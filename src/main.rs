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
