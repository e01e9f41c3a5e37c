use std::process::ExitCode;

use clap::Parser;

use browser_controller::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Crds(_)) | Some(Command::Render(_)) | None => {
            eprintln!("browser-controller: not implemented yet");
            ExitCode::FAILURE
        }
    }
}
