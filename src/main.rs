use std::process::ExitCode;

use clap::Parser;

use browser_controller::cli::{Cli, Command, RunArgs};
use browser_controller::{commands, operator};

fn run_operator(args: RunArgs) -> ExitCode {
    if let Err(e) = operator::init_logging(args.log_format, &args.log_level) {
        eprintln!("browser-controller: {e}");
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("browser-controller: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(operator::run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "operator stopped");
            eprintln!("browser-controller: {e}");
            ExitCode::FAILURE
        }
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
        Some(Command::Crds(_)) => {
            eprintln!("browser-controller: crds not implemented yet");
            ExitCode::FAILURE
        }
        None => run_operator(cli.run),
    }
}
