//! The `fastmp-npb` binary as users run it: NPB's report, `--json`, exit statuses, and clear
//! errors for what it cannot run.

use std::process::{Command, Output};

fn npb(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fastmp-npb"))
        .args(args)
        .env_remove("FASTMP_NP")
        .env_remove("FASTMP_DEVICE")
        .output()
        .expect("run fastmp-npb")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn report_says_successful_and_exit_is_zero() {
    let out = npb(&["ep", "--class", "S", "--np", "2"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("EP Benchmark Completed."), "{stdout}");
    assert!(stdout.contains("Verification    =               SUCCESSFUL"), "{stdout}");
    assert!(stdout.contains("Total processes =                        2"), "{stdout}");
}

#[test]
fn json_is_one_line_with_the_outcome() {
    let out = npb(&["is", "--class", "S", "--np", "2", "--device", "tcp", "--json"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    let line = lines[0];
    for field in [r#""kernel":"is""#, r#""class":"S""#, r#""np":2"#, r#""device":"tcp""#, r#""verified":true"#] {
        assert!(line.contains(field), "{field} missing from {line}");
    }
    assert!(line.starts_with('{') && line.ends_with('}') && line.contains(r#""mops":"#), "{line}");
}

#[test]
fn unsupported_rank_count_and_bad_class_are_clear_errors() {
    let out = npb(&["cg", "--class", "S", "--np", "3"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("power-of-two number of ranks, got 3"), "{}", text(&out.stderr));

    let out = npb(&["cg", "--class", "Q"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("one of S, W, A, B, C"), "{}", text(&out.stderr));

    let out = npb(&["lu", "--class", "S"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("one of ep, is, cg, mg, ft"), "{}", text(&out.stderr));
}
