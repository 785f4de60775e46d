//! The `ferroshmem` command: `ferroshmem run -n N -- PROGRAM [ARGS...]` runs a program as the
//! N PEs of one job; `ferroshmem cc` and `ferroshmem c++` compile C and C++ programs against
//! the C API. See [`ferroshmem::launcher`].

fn main() -> std::process::ExitCode {
    ferroshmem::launcher::cli_main()
}
