//! The multi-process harness's own checks: the section checker, the log parser, the counters, and
//! how a worker that hangs, stays silent, fails or never reports fails the test. They run in a test
//! binary of their own: several panic on purpose, and a fork() taken by another test of the same
//! binary while a panic holds the backtrace lock would leave its child stuck on that lock.
use leasehold_testkit::processes::*;
use leasehold_testkit::TempDir;
use std::process::Command;
use std::time::Duration;

fn section(enter: u64, exit: u64, fence: u64, who: &str) -> Section {
    Section {
        enter,
        exit,
        fence,
        who: who.to_owned(),
    }
}

#[test]
fn counts_overlaps_fences_out_of_order_and_handoffs() {
    let clean = [
        section(20, 30, 2, "c"),
        section(0, 10, 1, "rust"),
        section(30, 40, 3, "c"),
        section(45, 50, 7, "php"),
    ];
    let check = check_sections(&clean);
    assert_eq!((check.sections, check.overlaps), (4, 0));
    assert_eq!((check.fence_out_of_order, check.handoffs), (0, 2));
    assert!(check.first_problem.is_none());

    // The third begins inside the first, which outlasts the second.
    let nested = [
        section(0, 100, 1, "a"),
        section(10, 20, 2, "b"),
        section(50, 60, 3, "c"),
    ];
    let check = check_sections(&nested);
    assert_eq!((check.overlaps, check.fence_out_of_order), (2, 0));
    let reused = [section(0, 10, 5, "a"), section(10, 20, 5, "a")];
    let check = check_sections(&reused);
    assert_eq!((check.overlaps, check.fence_out_of_order), (0, 1));
    assert!(check.first_problem.is_some());
}

#[test]
fn parses_logged_lines() {
    assert_eq!(
        Section::parse("1 2 3", "php"),
        Some(section(1, 2, 3, "php"))
    );
    assert_eq!(Section::parse("1 2", "php"), None);
    assert_eq!(Section::parse("1 2 3 4", "php"), None);
    assert_eq!(Section::parse("1 x 3", "php"), None);
}

fn sh(script: &str) -> Worker {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", script]);
    Worker::start("sh", cmd)
}

#[test]
fn reads_reports_and_waits() {
    let mut worker =
        sh("echo noise; printf 'test child_worker ... @@ ready \\n'; read go; echo \"@@ $go\"");
    assert_eq!(worker.report(), "ready");
    worker.say("went");
    assert_eq!(worker.report(), "went");
    worker.finish();
}

#[test]
#[should_panic(expected = "worker sh failed (exit status: 3); it printed:\nout\nerr")]
fn a_failed_worker_fails_the_test_with_its_output() {
    sh("echo out; sleep 0.1; echo err >&2; exit 3").finish();
}

#[test]
#[should_panic(expected = "cannot start worker missing")]
fn a_program_that_is_not_there_fails_the_test() {
    Worker::start("missing", Command::new("leasehold-no-such-program"));
}

#[test]
#[should_panic(expected = "worker sh ended (exit status: 0) without reporting")]
fn a_worker_that_ends_without_reporting_fails_the_test() {
    sh("echo no report").report();
}

#[test]
#[should_panic(expected = "worker sh still ran after 200ms; it printed:\nstarted")]
fn a_hung_worker_is_killed_and_fails_the_test() {
    sh("echo started; exec sleep 60")
        .limit(Duration::from_millis(200))
        .finish();
}

#[test]
#[should_panic(expected = "worker sh reported nothing within 200ms")]
fn a_silent_worker_is_killed_and_fails_the_test() {
    sh("exec sleep 60")
        .limit(Duration::from_millis(200))
        .report();
}

#[test]
fn counters_are_shared_between_mappings() {
    let dir = TempDir::new("counters");
    let path = dir.path().join("counters");
    let a = Counters::create(&path);
    let b = Counters::open(&path);
    a.enter();
    b.enter();
    a.leave();
    assert_eq!((b.get(INSIDE), b.get(MOST), b.get(ENTERS)), (1, 2, 2));
}
