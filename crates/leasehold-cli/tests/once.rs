//! `leasehold once` under kill -9: processes race on a few once-keys, some are killed at random
//! moments (before, during and after the action), rounds repeat. Every key's action must run at most
//! once (nothing reruns an attempt that may have happened), and every call that succeeds must print
//! the one recorded result. The seed is printed; `TORTURE_SEED=…` replays the kills.

mod support;

use leasehold_testkit::history::seed;
use leasehold_testkit::unique_key;
use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;
use support::*;

const KEYS: usize = 3;
const ROUNDS: usize = 3;
const CALLS_PER_KEY: usize = 4;
/// How long the action takes, and the window the kills fall in: most land while some call of the
/// round runs the action or waits for it.
const ACTION: &str = "0.4";
const KILL_WITHIN_MS: u64 = 900;

fn kill_nine_never_repeats_an_action(b: &Backend) {
    let mut rng = fastrand::Rng::with_seed(seed("once under kill -9"));
    let scratch = scratch();
    let url = b.url();
    // Fresh keys every round, so that every round races on keys nobody has run yet.
    let keys: Vec<String> = (0..KEYS * ROUNDS)
        .map(|_| unique_key("once-kill"))
        .collect();
    let mut printed: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    let (mut killed, mut incomplete) = (0, 0);
    for round in 0..ROUNDS {
        let mut calls = Vec::new();
        for (k, key) in keys.iter().enumerate().skip(round * KEYS).take(KEYS) {
            let actions = file(&scratch, &format!("actions-{k}"));
            // The action: append to the key's action log (the irreversible step), print its result.
            let script = format!(
                "echo \"$LEASEHOLD_FENCE\" >> {a}; sleep {ACTION}; echo \"result of fence $LEASEHOLD_FENCE\"",
                a = actions.display()
            );
            for _ in 0..CALLS_PER_KEY {
                let child = spawn(
                    &url,
                    &[
                        "once", "--ttl", "2s", "--wait", "20s", key, "--", "sh", "-c", &script,
                    ],
                );
                // A third of the calls die by SIGKILL somewhere in their life.
                let kill_after =
                    (rng.u32(0..3) == 0).then(|| Duration::from_millis(rng.u64(0..KILL_WITHIN_MS)));
                calls.push((k, child, kill_after));
            }
        }
        let mut waiting = Vec::new();
        for (k, child, kill_after) in calls {
            if let Some(after) = kill_after {
                let pid = child.id() as i32;
                std::thread::spawn(move || {
                    std::thread::sleep(after);
                    // SAFETY: kill(2) on a child of this test; at worst it already exited.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                });
            }
            waiting.push((k, child));
        }
        for (k, child) in waiting {
            let out = finish(child);
            match (out.status.code(), out.status.signal()) {
                (Some(0), _) => printed.entry(k).or_default().push(stdout(&out)),
                (Some(76), _) => incomplete += 1,
                (None, Some(9)) => killed += 1,
                other => panic!("unexpected end {other:?}: {}", stderr(&out)),
            }
        }
    }
    for k in 0..KEYS * ROUNDS {
        let actions =
            std::fs::read_to_string(file(&scratch, &format!("actions-{k}"))).unwrap_or_default();
        let ran: Vec<&str> = actions.lines().collect();
        assert!(
            ran.len() <= 1,
            "key {k}: the action ran {} times: {ran:?}",
            ran.len()
        );
        let results = printed.get(&k).cloned().unwrap_or_default();
        if let Some(first) = results.first() {
            assert!(results.iter().all(|r| r == first), "key {k}: {results:?}");
            // The printed result is the recorded one, of the one run.
            assert_eq!(ran.len(), 1, "key {k}: a result without an action");
            assert_eq!(first.trim(), format!("result of fence {}", ran[0]));
        }
    }
    eprintln!(
        "once under kill -9: {} calls, {killed} killed, {incomplete} told of an incomplete attempt, \
         {} succeeded; every action ran at most once",
        KEYS * CALLS_PER_KEY * ROUNDS,
        printed.values().map(Vec::len).sum::<usize>()
    );
}

#[test]
fn kill_nine_never_repeats_an_action_local() {
    kill_nine_never_repeats_an_action(&Backend::local());
}

#[test]
fn kill_nine_never_repeats_an_action_redis() {
    kill_nine_never_repeats_an_action(&Backend::redis());
}

#[test]
fn a_later_call_replays_the_output_and_status_and_recover_decides() {
    let b = Backend::local();
    let url = b.url();
    let key = unique_key("once-replay");
    let first = leasehold(
        &url,
        &["once", &key, "--", "sh", "-c", "echo hello; exit 3"],
    );
    assert_eq!(code(&first), 3);
    assert_eq!(stdout(&first), "hello\n");
    let again = leasehold(
        &url,
        &["once", &key, "--", "sh", "-c", "echo never; exit 0"],
    );
    assert_eq!(code(&again), 3, "{}", stderr(&again));
    assert_eq!(stdout(&again), "hello\n");
    // A command that cannot start leaves nothing behind.
    let key = unique_key("once-missing");
    let missing = leasehold(&url, &["once", &key, "--", "/nonexistent/command"]);
    assert_eq!(code(&missing), 127);
    let then = leasehold(&url, &["once", &key, "--", "sh", "-c", "echo ran"]);
    assert_eq!((code(&then), stdout(&then).as_str()), (0, "ran\n"));
    // Killed mid-run: the next call exits 76 until --recover.
    let key = unique_key("once-recover");
    let child = spawn(
        &url,
        &[
            "once",
            "--ttl",
            "1s",
            &key,
            "--",
            "sh",
            "-c",
            "exec sleep 30",
        ],
    );
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = finish(child);
    let told = leasehold(&url, &["once", &key, "--", "sh", "-c", "echo never"]);
    assert_eq!(code(&told), 76, "{}", stderr(&told));
    assert!(stderr(&told).contains("--recover"), "{}", stderr(&told));
    let rerun = leasehold(
        &url,
        &[
            "once",
            "--recover",
            "rerun",
            &key,
            "--",
            "sh",
            "-c",
            "echo again",
        ],
    );
    assert_eq!((code(&rerun), stdout(&rerun).as_str()), (0, "again\n"));
    let replay = leasehold(&url, &["once", &key, "--", "sh", "-c", "echo never"]);
    assert_eq!((code(&replay), stdout(&replay).as_str()), (0, "again\n"));
}
