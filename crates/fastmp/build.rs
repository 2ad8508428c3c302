//! Builds the C shim of the `mpi` device (`csrc/*.c`) with the system's MPI compiler wrapper
//! when the `mpi` feature is on; without it, nothing (the default build needs no C toolchain).
//!
//! The wrapper (`MPICC`, else `mpicc` on `PATH`) compiles the shim and reports the link flags;
//! nothing parses `mpi.h` from Rust (no bindgen, no libclang).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "mpi")]
    mpi::build();
}

#[cfg(feature = "mpi")]
mod mpi {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    pub fn build() {
        println!("cargo:rerun-if-changed=csrc");
        println!("cargo:rerun-if-env-changed=MPICC");
        let mpicc = std::env::var("MPICC").unwrap_or_else(|_| "mpicc".into());
        let link = link_flags(&mpicc).unwrap_or_else(|why| {
            panic!(
                "fastmp feature `mpi`: cannot use the MPI compiler wrapper `{mpicc}`: {why}. Install an MPI \
                 (e.g. `apt-get install libopenmpi-dev` or `libmpich-dev`) or point MPICC at its mpicc"
            )
        });
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("csrc");
        let mut sources: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.extension().is_some_and(|ext| ext == "c"))
            .collect();
        sources.sort();
        for source in &sources {
            println!("cargo:rerun-if-changed={}", source.display());
        }
        cc::Build::new()
            .compiler(&mpicc)
            .files(&sources)
            .include(&dir)
            .flag_if_supported("-std=c11")
            .warnings(true)
            .compile("fastmp_mpi_shim");
        for flag in link {
            if let Some(dir) = flag.strip_prefix("-L") {
                println!("cargo:rustc-link-search=native={dir}");
            } else if let Some(lib) = flag.strip_prefix("-l") {
                println!("cargo:rustc-link-lib={lib}");
            } else if let Some(rest) = flag.strip_prefix("-Wl,") {
                for arg in rest.split(',') {
                    println!("cargo:rustc-link-arg=-Wl,{arg}");
                }
            } else if flag == "-pthread" {
                println!("cargo:rustc-link-arg=-pthread");
            }
        }
    }

    /// The linker flags of the wrapper: Open MPI answers `--showme:link`, MPICH `-link_info`.
    fn link_flags(mpicc: &str) -> Result<Vec<String>, String> {
        let mut last = String::new();
        for args in [&["--showme:link"][..], &["-link_info"][..]] {
            match Command::new(mpicc).args(args).output() {
                Ok(out) if out.status.success() => {
                    let text = String::from_utf8_lossy(&out.stdout).into_owned();
                    // MPICH's -link_info starts with the compiler itself.
                    return Ok(text.split_whitespace().filter(|w| w.starts_with('-')).map(str::to_owned).collect());
                }
                Ok(out) => {
                    last = format!("`{mpicc} {}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr))
                }
                Err(e) => return Err(format!("not found or not runnable ({e})")),
            }
        }
        Err(last)
    }
}
