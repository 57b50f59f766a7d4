//! `leasehold metrics --dir`: the counters PHP workers wrote with `PoolMetrics::flush()`, summed
//! per pool. The hand-made files are shared with the PHP suite (bindings/php/tests/PoolMetricsTest.php),
//! which renders them with `PoolMetrics::render()`: both must print the same expected text, byte for
//! byte (see the fixture directory's README for what each file exercises).

use std::path::PathBuf;
use std::process::{Command, Output};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bindings/php/tests/fixtures/pool-metrics")
}

fn metrics(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .arg("metrics")
        .args(args)
        .env_remove("LEASEHOLD_URL")
        .output()
        .expect("runs leasehold")
}

fn expected(name: &str) -> String {
    std::fs::read_to_string(fixtures().join(name)).expect("reads the expected text")
}

#[test]
fn sums_every_worker_of_each_pool_as_the_php_renderer_does() {
    let dir = fixtures();
    let out = metrics(&["--dir", dir.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text, expected("expected.prom"));
    // The sums, spelled out: 7 + 5 from the live workers, 1000 retired; the folded file's 1000 not
    // again, the unfinished .tmp not at all.
    assert!(text.contains(
        "leasehold_acquired_total{pool=\"www\",backend=\"local\",prefix=\"leasehold:\"} 1012\n"
    ));
    assert!(text.contains("leasehold_acquired_total{pool=\"api\","));
    assert_eq!(
        text.matches("# TYPE leasehold_acquired_total ").count(),
        1,
        "one family block"
    );
    assert!(String::from_utf8_lossy(&out.stderr).is_empty());
}

#[test]
fn per_worker_labels_each_worker_and_the_retired_ones() {
    let dir = fixtures();
    let out = metrics(&["--per-worker", "--dir", dir.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text, expected("expected-per-worker.prom"));
    assert!(text.contains("{pool=\"www\",worker=\"retired\",backend=\"local\""));
}

#[test]
fn a_missing_directory_exits_66_with_one_line() {
    let out = metrics(&["--dir", "/nonexistent/leasehold-metrics"]);
    assert_eq!(out.status.code(), Some(66));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(
            "leasehold: the metrics directory /nonexistent/leasehold-metrics does not exist"
        ),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn an_empty_directory_prints_nothing_and_a_foreign_file_is_reported() {
    let dir = tempfile_dir();
    let out = metrics(&["--dir", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty());

    std::fs::create_dir(dir.join("www")).unwrap();
    std::fs::write(dir.join("www/1-2-3.json"), "{\"format\":99}").unwrap();
    let out = metrics(&["--dir", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a metrics file of this version"));
    std::fs::remove_dir_all(&dir).unwrap();
}

fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "leasehold-cli-metrics-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    ));
    std::fs::create_dir(&dir).unwrap();
    dir
}
