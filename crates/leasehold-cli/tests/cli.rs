//! The `leasehold` binary end to end, on the local backend and on a real redis-server (and `run` on
//! MariaDB in both MySQL modes): what a cron line
//! `leasehold run --url … nightly-report -- php report.php` must do for an operator.

mod support;

use leasehold_testkit::{unique_key, wait_until};
use std::time::{Duration, Instant};
use support::*;

/// Every scenario below runs once per backend.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod local {
            $( #[test] fn $name() { super::$name(&super::Backend::local()); } )*
        }
        mod redis {
            $( #[test] fn $name() { super::$name(&super::Backend::redis()); } )*
        }
    };
}

on_both_backends!(
    concurrent_runs_take_turns_with_increasing_fences,
    a_held_key_exits_75_at_once_or_after_the_wait,
    the_wait_ends_when_the_holder_finishes,
    the_commands_status_is_passed_through_and_the_lease_released,
    the_command_gets_key_fence_and_token,
    sigterm_to_leasehold_reaches_the_command,
    a_lost_lease_sends_sigterm_and_exits_79,
    a_lost_lease_with_ignore_lets_the_command_finish_and_exits_79,
    status_shows_free_and_held_with_time_left_and_fence,
    bench_json_parses,
    long_command_keeps_its_lease_alive,
);

fn concurrent_runs_take_turns_with_increasing_fences(b: &Backend) {
    let key = unique_key("turns");
    let scratch = scratch();
    let marker = file(&scratch, "inside");
    let log = file(&scratch, "log");
    // mkdir is atomic: it fails if another holder is inside, which would be an overlap.
    let script = format!(
        "mkdir {m} || {{ echo OVERLAP >> {l}; exit 1; }}; echo \"$LEASEHOLD_FENCE $0\" >> {l}; sleep 0.2; rmdir {m}",
        m = marker.display(),
        l = log.display()
    );
    let url = b.url();
    let runs: Vec<_> = (0..4)
        .map(|i| {
            spawn(
                &url,
                &[
                    "run",
                    "--wait",
                    "50s",
                    &key,
                    "--",
                    "sh",
                    "-c",
                    &script,
                    &i.to_string(),
                ],
            )
        })
        .collect();
    for run in runs {
        let out = finish(run);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
    let text = read(&log);
    assert!(!text.contains("OVERLAP"), "{text}");
    let fences: Vec<u64> = text
        .lines()
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(fences.len(), 4, "{text}");
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences not increasing: {text}"
    );
    let mut workers: Vec<&str> = text.lines().map(|l| l.split(' ').nth(1).unwrap()).collect();
    workers.sort();
    assert_eq!(workers, ["0", "1", "2", "3"]);
}

fn a_held_key_exits_75_at_once_or_after_the_wait(b: &Backend) {
    let key = unique_key("held");
    let client = b.client();
    let _held = client
        .try_acquire(&key, Duration::from_secs(60))
        .expect("hold the key");
    let ran = file(&scratch(), "ran");
    let touch = format!("touch {}", ran.display());

    let out = leasehold(&b.url(), &["run", &key, "--", "sh", "-c", &touch]);
    assert_eq!(code(&out), 75);
    let err = one_line_error(&out);
    assert!(err.contains("not acquired") && err.contains(&key), "{err}");

    let start = Instant::now();
    let out = leasehold(
        &b.url(),
        &["run", "--wait", "400ms", &key, "--", "sh", "-c", &touch],
    );
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(
        start.elapsed() >= Duration::from_millis(400),
        "{:?}",
        start.elapsed()
    );
    one_line_error(&out);

    let out = leasehold(
        &b.url(),
        &["run", "--quiet", &key, "--", "sh", "-c", &touch],
    );
    assert_eq!(code(&out), 75);
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    assert!(!ran.exists(), "the command ran without the lock");
}

fn the_wait_ends_when_the_holder_finishes(b: &Backend) {
    let key = unique_key("handover");
    let scratch = scratch();
    let ready = file(&scratch, "ready");
    let fence_file = file(&scratch, "fence");
    let holder = spawn(
        &b.url(),
        &[
            "run",
            &key,
            "--",
            "sh",
            "-c",
            &format!(
                "echo $LEASEHOLD_FENCE > {}; touch {}; sleep 1",
                fence_file.display(),
                ready.display()
            ),
        ],
    );
    wait_for_file(&ready);
    let first: u64 = std::fs::read_to_string(&fence_file)
        .expect("the holder wrote its fence")
        .trim()
        .parse()
        .expect("a fence");
    let out = leasehold(
        &b.url(),
        &[
            "run",
            "--wait",
            "50s",
            &key,
            "--",
            "sh",
            "-c",
            "echo $LEASEHOLD_FENCE",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let second: u64 = stdout(&out).trim().parse().expect("a fence");
    assert!(second > first, "fence {second} after {first}");
    assert_eq!(code(&finish(holder)), 0);
}

fn the_commands_status_is_passed_through_and_the_lease_released(b: &Backend) {
    let key = unique_key("status");
    let url = b.url();
    let out = leasehold(&url, &["run", &key, "--", "sh", "-c", "exit 7"]);
    assert_eq!(code(&out), 7);
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    let out = leasehold(&url, &["run", &key, "--", "sh", "-c", "kill -KILL $$"]);
    assert_eq!(code(&out), 128 + 9);
    let out = leasehold(&url, &["run", &key, "--", "true"]);
    assert_eq!(code(&out), 0);
    // Each run released its lease: the next one got the key at once.
    let info = b.client().inspect(&key).expect("inspect");
    assert!(!info.held);

    let out = leasehold(&url, &["run", &key, "--", "/nonexistent/command"]);
    assert_eq!(code(&out), 127);
    one_line_error(&out);
    assert!(!b.client().inspect(&key).expect("inspect").held);
}

fn the_command_gets_key_fence_and_token(b: &Backend) {
    let key = unique_key("env");
    let out = leasehold(
        &b.url(),
        &[
            "run",
            &key,
            "--",
            "sh",
            "-c",
            "printf '%s\\n%s\\n%s\\n' \"$LEASEHOLD_KEY\" \"$LEASEHOLD_FENCE\" \"$LEASEHOLD_TOKEN\"",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(lines[0], key);
    let fence: u64 = lines[1].parse().expect("LEASEHOLD_FENCE is a number");
    assert!(fence >= 1, "{text}");
    assert_eq!(lines[2].len(), 32, "{text}");
    assert!(lines[2]
        .bytes()
        .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    let info = b.client().inspect(&key).expect("inspect");
    // The fence stays readable where the backend keeps it after release (Redis keeps the counter;
    // the local backend deletes a released key's record).
    assert!(
        info.fence.is_none_or(|f| f == fence),
        "{:?} after fence {fence}",
        info.fence
    );
    assert!(!info.held);
}

fn sigterm_to_leasehold_reaches_the_command(b: &Backend) {
    let key = unique_key("signal");
    let scratch = scratch();
    let ready = file(&scratch, "ready");
    let got = file(&scratch, "got");
    let script = format!(
        "trap 'echo TERM > {g}; exit 42' TERM; touch {r}; while :; do sleep 0.05; done",
        g = got.display(),
        r = ready.display()
    );
    let run = spawn(&b.url(), &["run", &key, "--", "sh", "-c", &script]);
    wait_for_file(&ready);
    // SAFETY: kill(2) on our own unreaped child.
    unsafe { libc::kill(run.id() as i32, libc::SIGTERM) };
    let out = finish(run);
    assert_eq!(code(&out), 42, "{}", stderr(&out));
    assert_eq!(read(&got).trim(), "TERM");
    assert!(!b.client().inspect(&key).expect("inspect").held);
}

fn a_lost_lease_sends_sigterm_and_exits_79(b: &Backend) {
    let key = unique_key("lost");
    let scratch = scratch();
    let ready = file(&scratch, "ready");
    let got = file(&scratch, "got");
    let script = format!(
        "trap 'echo TERM > {g}; exit 0' TERM; touch {r}; while :; do sleep 0.05; done",
        g = got.display(),
        r = ready.display()
    );
    let run = spawn(
        &b.url(),
        &["run", "--ttl", "1500ms", &key, "--", "sh", "-c", &script],
    );
    wait_for_file(&ready);
    b.delete_key(&key);
    let out = finish(run);
    assert_eq!(code(&out), 79, "{}", stderr(&out));
    assert_eq!(read(&got).trim(), "TERM", "the command was not told");
    // The command's own stderr is shared (sh may say "Terminated"); leasehold's lines name the loss.
    let err = stderr(&out);
    let ours: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("leasehold: "))
        .collect();
    assert_eq!(ours.len(), 2, "{err}");
    assert!(
        ours[0].contains("lost") && ours[0].contains(&key) && ours[0].contains("SIGTERM"),
        "{err}"
    );
    assert!(ours[1].contains("lost"), "{err}");
}

fn a_lost_lease_with_ignore_lets_the_command_finish_and_exits_79(b: &Backend) {
    let key = unique_key("ignore");
    let scratch = scratch();
    let ready = file(&scratch, "ready");
    let done = file(&scratch, "done");
    let script = format!(
        "trap 'echo TERM > {d}; exit 0' TERM; touch {r}; while [ ! -e {r}.go ]; do sleep 0.05; done; echo finished > {d}",
        d = done.display(),
        r = ready.display()
    );
    let run = spawn(
        &b.url(),
        &[
            "run",
            "--ttl",
            "1500ms",
            "--on-lost",
            "ignore",
            &key,
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    wait_for_file(&ready);
    b.delete_key(&key);
    // The loss shows up at the next renewal (a third of the TTL); give it time, then let the command end.
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::write(format!("{}.go", ready.display()), "").expect("write go file");
    let out = finish(run);
    assert_eq!(code(&out), 79, "{}", stderr(&out));
    assert_eq!(read(&done).trim(), "finished");
}

fn status_shows_free_and_held_with_time_left_and_fence(b: &Backend) {
    let key = unique_key("inspect");
    let url = b.url();
    let out = leasehold(&url, &["status", &key]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("state:      free"), "{text}");

    let client = b.client();
    let lease = client
        .try_acquire(&key, Duration::from_secs(30))
        .expect("acquire");
    let out = leasehold(&url, &["status", &key]);
    let text = stdout(&out);
    assert!(text.contains("state:      held"), "{text}");
    assert!(
        text.contains(&format!("last fence: {}", lease.fence())),
        "{text}"
    );
    assert!(text.contains(&format!("key:        {key}")), "{text}");

    let out = leasehold(&url, &["status", "--json", &key]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v: serde_json::Value =
        serde_json::from_str(stdout(&out).trim()).expect("status --json parses");
    assert_eq!(v["key"], key.as_str());
    assert_eq!(v["held"], true);
    assert_eq!(v["fence"], lease.fence());
    let lease_fence = lease.fence();
    let left = v["remaining_ms"].as_u64().expect("remaining_ms");
    assert!(left > 0 && left <= 30_000, "{left}");

    lease.release().expect("release");
    let out = leasehold(&url, &["status", "--json", &key]);
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("parses");
    assert_eq!(v["held"], false);
    assert!(v["remaining_ms"].is_null());
    assert!(
        v["fence"].is_null() || v["fence"] == lease_fence,
        "fence {} after {lease_fence}",
        v["fence"]
    );
}

fn bench_json_parses(b: &Backend) {
    let prefix = format!("{}:", unique_key("bench"));
    let out = leasehold(
        &b.url(),
        &[
            "bench",
            "--workers",
            "3",
            "--keys",
            "2",
            "--duration",
            "1s",
            "--key-prefix",
            &prefix,
            "--json",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 1, "{text}");
    let v: serde_json::Value = serde_json::from_str(text.trim()).expect("bench --json parses");
    let cycles = v["cycles"].as_u64().expect("cycles");
    assert!(cycles > 0, "{text}");
    assert!(v["cycles_per_sec"].as_f64().expect("rate") > 0.0);
    assert_eq!(v["workers"], 3);
    assert_eq!(v["keys"], 2);
    for part in ["acquire", "release"] {
        let s = &v[part];
        assert!(s["count"].as_u64().expect("count") > 0, "{part}: {text}");
        let p50 = s["p50_us"].as_f64().expect("p50");
        let p99 = s["p99_us"].as_f64().expect("p99");
        let max = s["max_us"].as_f64().expect("max");
        assert!(p50 <= p99 && p99 <= max, "{part}: {text}");
    }
    let errors = v["errors"].as_object().expect("errors");
    for kind in [
        "not_acquired",
        "lost",
        "unavailable",
        "invalid_argument",
        "internal",
    ] {
        assert!(errors[kind].is_u64(), "{kind}: {text}");
    }
    assert_eq!(errors["lost"], 0, "{text}");
    assert_eq!(errors["unavailable"], 0, "{text}");
    // Every worker released every key at the end.
    for k in 0..2 {
        assert!(
            !b.client()
                .inspect(format!("{prefix}{k}"))
                .expect("inspect")
                .held
        );
    }
}

fn long_command_keeps_its_lease_alive(b: &Backend) {
    let key = unique_key("long");
    let scratch = scratch();
    let ready = file(&scratch, "ready");
    // Runs for three TTLs: only renewal keeps the key ours that long.
    let run = spawn(
        &b.url(),
        &[
            "run",
            "--ttl",
            "1s",
            &key,
            "--",
            "sh",
            "-c",
            &format!("touch {}; sleep 3", ready.display()),
        ],
    );
    wait_for_file(&ready);
    let client = b.client();
    let start = Instant::now();
    let mut held_throughout = true;
    while start.elapsed() < Duration::from_millis(2500) {
        held_throughout &= client.inspect(&key).expect("inspect").held;
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = finish(run);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(held_throughout, "the lease lapsed while the command ran");
}

// ---- backend-independent behaviour ----

#[test]
fn lost_lease_escalates_to_sigkill_after_the_grace_period() {
    let b = Backend::local();
    let key = unique_key("grace");
    let scratch = scratch();
    let ready = file(&scratch, "ready");
    // Ignores SIGTERM, so only the SIGKILL after --grace can stop it.
    let script = format!(
        "trap '' TERM; touch {}; while :; do sleep 0.05; done",
        ready.display()
    );
    let run = spawn(
        &b.url(),
        &[
            "run", "--ttl", "1500ms", "--grace", "300ms", &key, "--", "sh", "-c", &script,
        ],
    );
    wait_for_file(&ready);
    let start = Instant::now();
    b.delete_key(&key);
    let out = finish(run);
    assert_eq!(code(&out), 79, "{}", stderr(&out));
    assert!(
        start.elapsed() >= Duration::from_millis(300),
        "{:?}",
        start.elapsed()
    );
    assert!(
        stderr(&out).contains("killed by signal 9"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn lost_lease_with_kill_sends_sigkill_at_once() {
    let b = Backend::local();
    let key = unique_key("kill");
    let scratch = scratch();
    let ready = file(&scratch, "ready");
    let got = file(&scratch, "got");
    let script = format!(
        "trap 'echo TERM > {g}' TERM; touch {r}; while :; do sleep 0.05; done",
        g = got.display(),
        r = ready.display()
    );
    let run = spawn(
        &b.url(),
        &[
            "run",
            "--ttl",
            "1500ms",
            "--on-lost",
            "kill",
            &key,
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    wait_for_file(&ready);
    b.delete_key(&key);
    let out = finish(run);
    assert_eq!(code(&out), 79, "{}", stderr(&out));
    assert!(!got.exists(), "SIGTERM was sent with --on-lost kill");
}

#[test]
fn bad_urls_exit_64_on_one_line_without_the_password() {
    for url in [
        "redis://:hunter2@127.0.0.1:6390?bogus=1",
        "nope://user:hunter2@host",
        "redis://:hunter2@127.0.0.1:99999",
        "",
        "not a url",
    ] {
        let out = leasehold(url, &["run", "k", "--", "true"]);
        assert_eq!(code(&out), 64, "{url}: {}", stderr(&out));
        let err = one_line_error(&out);
        assert!(!err.contains("hunter2"), "{url}: {err}");
    }
}

#[test]
fn an_unreachable_backend_exits_69_without_the_password() {
    let port = leasehold_testkit::free_port();
    let url = format!("redis://:hunter2@127.0.0.1:{port}?connect_timeout_ms=300&io_timeout_ms=300");
    let ran = file(&scratch(), "ran");
    let out = leasehold(&url, &["run", "k", "--", "touch", ran.to_str().unwrap()]);
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    let err = one_line_error(&out);
    assert!(!err.contains("hunter2"), "{err}");
    assert!(!ran.exists());
    let out = leasehold(&url, &["status", "k"]);
    assert_eq!(code(&out), 69, "{}", stderr(&out));
}

#[test]
fn an_evicting_redis_exits_78_naming_the_policy() {
    let server = leasehold_testkit::RedisServer::start_with_args(
        Some("hunter2".into()),
        ["--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru"]
            .map(String::from)
            .to_vec(),
    );
    let dir = scratch();
    let ran = file(&dir, "ran");
    let out = leasehold(
        &server.url(),
        &["run", "k", "--", "touch", ran.to_str().unwrap()],
    );
    assert_eq!(code(&out), 78, "{}", stderr(&out));
    let err = one_line_error(&out);
    assert!(err.contains("maxmemory-policy is volatile-lru"), "{err}");
    assert!(err.contains("allow_eviction=true"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
    assert!(!ran.exists());
    // The operator's way out, taken on purpose.
    let out = leasehold(
        &server.url_with("allow_eviction=true"),
        &["run", "k", "--", "touch", ran.to_str().unwrap()],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(ran.exists());
}

#[test]
fn bad_usage_exits_64_on_one_line() {
    let url = Backend::local().url();
    for args in [
        &["run", "k"][..],
        &["run", "--ttl", "soon", "k", "--", "true"],
        &["run", "--ttl", "0s", "k", "--", "true"],
        &["run", "--ttl", "50ms", "k", "--", "true"],
        &["run", "--ttl", "8days", "k", "--", "true"],
        &["run", "", "--", "true"],
        &["run", "--on-lost", "maybe", "k", "--", "true"],
        &["bench", "--workers", "0"],
        &["frobnicate"],
    ] {
        let out = leasehold(&url, args);
        assert_eq!(code(&out), 64, "{args:?}: {}", stderr(&out));
        one_line_error(&out);
    }
}

#[test]
fn help_documents_the_exit_codes() {
    for args in [&["--help"][..], &["run", "--help"]] {
        let mut cmd = bin();
        cmd.args(args);
        let out = output(cmd);
        assert_eq!(code(&out), 0);
        let text = stdout(&out);
        for needle in ["75", "79", "69", "64", "LEASEHOLD_URL"] {
            assert!(text.contains(needle), "{args:?} lacks {needle}: {text}");
        }
    }
}

#[test]
fn the_url_comes_from_leasehold_url_when_no_option_is_given() {
    let b = Backend::local();
    let key = unique_key("env-url");
    let scratch = scratch();
    let ready = file(&scratch, "ready");
    let mut cmd = bin();
    cmd.env("LEASEHOLD_URL", b.url()).args([
        "run",
        &key,
        "--",
        "sh",
        "-c",
        &format!("touch {}; sleep 1", ready.display()),
    ]);
    let child = cmd.spawn().expect("spawn leasehold");
    wait_for_file(&ready);
    // The key is held in this directory while the command runs, so the URL was used.
    assert!(b.client().inspect(&key).expect("inspect").held);
    assert_eq!(code(&child.wait_with_output().expect("wait")), 0);
}

#[test]
fn bench_text_output_names_every_figure() {
    let b = Backend::local();
    let prefix = format!("{}:", unique_key("bench-text"));
    let out = leasehold(
        &b.url(),
        &[
            "bench",
            "--workers",
            "2",
            "--duration",
            "500ms",
            "--key-prefix",
            &prefix,
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    for needle in [
        "cycles/s", "acquire:", "release:", "handoff:", "p50", "p90", "p99", "max", "errors:",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    // No progress bar when stderr is not a terminal.
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
}

#[test]
fn sigint_is_forwarded_once_in_the_foreground_too() {
    let b = Backend::local();
    let key = unique_key("fg");
    let scratch = scratch();
    let ready = file(&scratch, "ready");
    let got = file(&scratch, "got");
    let script = format!(
        "trap 'echo INT >> {g}; exit 3' INT; touch {r}; while :; do sleep 0.05; done",
        g = got.display(),
        r = ready.display()
    );
    let run = spawn(
        &b.url(),
        &["run", "--foreground", &key, "--", "sh", "-c", &script],
    );
    wait_for_file(&ready);
    // SAFETY: kill(2) on our own unreaped child.
    unsafe { libc::kill(run.id() as i32, libc::SIGINT) };
    let out = finish(run);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert_eq!(read(&got).trim(), "INT");
    assert!(wait_until(Duration::from_secs(5), || !b
        .client()
        .inspect(&key)
        .unwrap()
        .held));
}

#[test]
fn a_backend_that_stops_answering_ends_the_command_when_the_lease_runs_out() {
    let server = leasehold_testkit::RedisServer::start();
    let url = server.url_with("connect_timeout_ms=200&io_timeout_ms=200");
    let key = unique_key("hung");
    let scratch = scratch();
    let ready = file(&scratch, "ready");
    let got = file(&scratch, "got");
    let script = format!(
        "trap 'echo TERM > {g}; exit 0' TERM; touch {r}; while :; do sleep 0.05; done",
        g = got.display(),
        r = ready.display()
    );
    let run = spawn(
        &url,
        &["run", "--ttl", "1s", &key, "--", "sh", "-c", &script],
    );
    wait_for_file(&ready);
    // Renewals now time out; once the lease's own time is up, it may be someone else's.
    server.pause();
    let out = finish(run);
    server.resume();
    assert_eq!(code(&out), 79, "{}", stderr(&out));
    assert_eq!(read(&got).trim(), "TERM");
    let err = stderr(&out);
    assert!(err.contains("ran out while renewals failed"), "{err}");
    assert!(err.contains("unavailable"), "{err}");
}

#[test]
fn shared_runs_and_permits_share_the_key() {
    let b = Backend::local();
    let url = b.url();
    let scratch = scratch();
    let hold = |flag: &[&str], key: &str, name: &str| {
        let ready = file(&scratch, name);
        let mut args: Vec<String> = vec!["run".into()];
        args.extend(flag.iter().map(|s| s.to_string()));
        args.extend([
            key.to_owned(),
            "--".into(),
            "sh".into(),
            "-c".into(),
            format!("touch {}; sleep 2", ready.display()),
        ]);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let child = spawn(&url, &refs);
        wait_for_file(&ready);
        child
    };
    // Two shared runs at once; an exclusive run is refused meanwhile.
    let key = unique_key("shared-run");
    let r1 = hold(&["--shared"], &key, "r1");
    let r2 = hold(&["--shared"], &key, "r2");
    let out = leasehold(&url, &["run", "-q", &key, "--", "true"]);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    let out = leasehold(&url, &["status", "--json", &key]);
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("parses");
    assert_eq!(v["holders"], 2, "{v}");
    assert_eq!(v["shared"], true, "{v}");
    assert_eq!(code(&finish(r1)), 0);
    assert_eq!(code(&finish(r2)), 0);

    // Two permits of two are taken: a third run is refused, status counts them.
    let sem = unique_key("permit-run");
    let p1 = hold(&["--permits", "2"], &sem, "p1");
    let p2 = hold(&["--permits", "2"], &sem, "p2");
    let out = leasehold(&url, &["run", "-q", "--permits", "2", &sem, "--", "true"]);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    let out = leasehold(&url, &["status", "--semaphore", &sem]);
    assert!(stdout(&out).contains("2 permits held"), "{}", stdout(&out));
    assert_eq!(code(&finish(p1)), 0);
    assert_eq!(code(&finish(p2)), 0);
    let out = leasehold(&url, &["run", "--permits", "0", &sem, "--", "true"]);
    assert_eq!(code(&out), 64, "{}", stderr(&out));
}

/// `leasehold run --url mysql://…` in both modes: the command runs under the lock (a second run of
/// the same key is refused with 75 while it does), gets its key and fence, and the lease is released
/// when it ends.
#[test]
fn run_takes_a_mysql_lock_in_both_modes() {
    let server = leasehold_testkit::MariaDbServer::start();
    for mode in ["named", "table"] {
        let url = server.url_with(&format!("lock={mode}"));
        let key = unique_key(&format!("mysql-{mode}"));
        let dir = scratch();
        let (started, finish_now) = (file(&dir, "started"), file(&dir, "finish"));
        // The job says it runs, then waits (never past the test's limit) until told to finish.
        let job = format!(
            "touch {started}; i=0; while [ ! -e {finish} ] && [ $i -lt 600 ]; do sleep 0.05; \
             i=$((i+1)); done; printf '%s %s\\n' \"$LEASEHOLD_KEY\" \"$LEASEHOLD_FENCE\"",
            started = started.display(),
            finish = finish_now.display(),
        );
        let holder = spawn(&url, &["run", &key, "--", "sh", "-c", &job]);
        wait_for_file(&started);

        let out = leasehold(&url, &["run", &key, "--", "true"]);
        assert_eq!(code(&out), 75, "{mode}: {}", stderr(&out));
        let err = one_line_error(&out);
        assert!(!err.contains(leasehold_testkit::MARIADB_PASSWORD), "{err}");
        let client = leasehold::connect(&url).expect("connect");
        assert!(client.inspect(&key).expect("inspect").held, "{mode}");

        std::fs::write(&finish_now, "").expect("tell the job to finish");
        let out = finish(holder);
        assert_eq!(code(&out), 0, "{mode}: {}", stderr(&out));
        let text = stdout(&out);
        let (got_key, fence) = text.trim().rsplit_once(' ').expect("key and fence");
        assert_eq!(got_key, key, "{mode}");
        assert!(
            fence.parse::<u64>().expect("a fence") >= 1,
            "{mode}: {text}"
        );
        assert!(!client.inspect(&key).expect("inspect").held, "{mode}");
        let out = leasehold(&url, &["run", &key, "--", "true"]);
        assert_eq!(code(&out), 0, "{mode}: {}", stderr(&out));
    }
}
