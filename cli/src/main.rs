//! `scrinalia`: the operator command line. Everything lives in the library; this only hands over the exit code.

fn main() -> std::process::ExitCode {
    scrinalia_cli::main()
}
