//! `runner`: see the library documentation.

use std::process::ExitCode;

fn main() -> ExitCode {
    let code = runner::cli::main();
    ExitCode::from(u8::try_from(code.clamp(0, 255)).unwrap_or(1))
}
