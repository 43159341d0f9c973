//! tfcapi-lint: checks Terraform/OpenTofu modules and module images against the CAPTF contract
//! (spec: tfcapi-lint). The work is in the library; this only wires stdout, stderr and the exit
//! code.

fn main() {
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    let code = tfcapi_lint::cli::run(std::env::args_os(), &mut stdout.lock(), &mut stderr.lock());
    std::process::exit(code);
}
