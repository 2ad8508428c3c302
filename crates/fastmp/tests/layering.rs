//! The device layer's boundary: nothing outside `src/device/` names the shm device's modules or
//! types — no `use`, no path, no doc link. Layers above reach a device only through the `Device`
//! trait and the hooks it returns (`Device::collectives`), so a new transport changes nothing
//! above `device/` (the launcher constructs devices through re-exports in `device/mod.rs`).

use std::path::{Path, PathBuf};

/// What names the shm device's internals: a path into its module, or one of its types. Matched
/// as whole tokens, so prose such as "the shm device" or "shm's lanes" passes.
const FORBIDDEN: &[&str] = &["shm::", "device::shm", "ShmEndpoint", "NativeArea", "ShmCollectives"];

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The forbidden tokens on `line`.
fn offending_tokens(line: &str) -> Vec<&'static str> {
    FORBIDDEN
        .iter()
        .copied()
        .filter(|pattern| {
            line.match_indices(pattern).any(|(at, _)| {
                let before = line[..at].chars().next_back();
                let after = line[at + pattern.len()..].chars().next();
                let starts_token = !before.is_some_and(is_ident);
                // `shm::` ends in a separator; the others must not run into a longer name.
                let ends_token = pattern.ends_with("::") || !after.is_some_and(is_ident);
                starts_token && ends_token
            })
        })
        .collect()
}

/// Every Rust file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// `file:line: tokens: text` for every line outside `src/device/` that names shm internals.
fn violations(src: &Path) -> Vec<String> {
    let device = src.join("device");
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in files.iter().filter(|f| !f.starts_with(&device)) {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        for (i, line) in text.lines().enumerate() {
            let tokens = offending_tokens(line);
            if !tokens.is_empty() {
                let shown = file.strip_prefix(src).unwrap_or(file).display();
                found.push(format!("src/{shown}:{}: {tokens:?}: {}", i + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn nothing_outside_the_device_layer_names_shm_internals() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    assert!(src.join("device").is_dir(), "expected the device layer at {}", src.join("device").display());
    let found = violations(&src);
    assert!(found.is_empty(), "shm internals named outside src/device/:\n{}", found.join("\n"));
}

/// The matcher catches what the old code had (imports, paths in doc comments, the downcast to
/// the area type) and lets prose about the device through.
#[test]
fn the_patterns_catch_paths_and_types_but_not_prose() {
    for caught in [
        "use crate::device::shm::native::{LANES, NativeArea};",
        "use crate::device::shm::ShmWorld;",
        "//! primitives of the lock-free core (`device::shm::{ring, board, record}`),",
        "    /// Per lane (see `device::shm::native::LANES`), the number",
        "            .and_then(|area| area.downcast::<NativeArea>().ok())",
        "use crate::device::shm;",
        "let ep: ShmEndpoint = todo!();",
        "shm::ShmWorld::new(2, 8192)",
    ] {
        assert!(!offending_tokens(caught).is_empty(), "not caught: {caught}");
    }
    for prose in [
        "/// Shared-memory area for device-native collectives (shm device only).",
        "//! (the `shm` device: plain data moves with a single copy)",
        "/// on shm, a handle to the communicator's native area; shm's lanes",
        "let fastshm::x = 1; // not the device",
        "use crate::device::shmem_helpers;",
        "NativeAreaLike, MyShmEndpoints",
    ] {
        assert!(offending_tokens(prose).is_empty(), "prose flagged: {prose}");
    }
}
