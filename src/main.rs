use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use browser_controller::api::crd::{self, Layout};
use browser_controller::cli::{Cli, Command, CrdsArgs};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Crds(args)) => print_crds(&args),
        Some(Command::Render(_)) | None => {
            eprintln!("browser-controller: not implemented yet");
            ExitCode::FAILURE
        }
    }
}

fn print_crds(args: &CrdsArgs) -> ExitCode {
    let layout = if args.split_groups {
        Layout::SplitGroups
    } else {
        Layout::Default
    };
    let written = crd::to_yaml(layout)
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
