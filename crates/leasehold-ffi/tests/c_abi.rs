//! Builds the C tests in tests/c against this package's own libleasehold.so, runs each under
//! valgrind against real backends (a temporary directory, a redis-server of our own on a free
//! loopback port, and one MariaDB for the whole binary in both MySQL modes), and fails on any failed
//! check, memory error or leaked byte.

use leasehold_testkit::ffi::{build_dir, compile, library_dir, workspace_dir};
use leasehold_testkit::{free_port, MariaDbServer, RedisServer, TempDir};
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

/// The longest one C test may run under valgrind before it counts as hung.
const RUN_LIMIT: Duration = Duration::from_secs(300);

/// What one run of a C test under valgrind gave: its status (None if it hung and was killed), and
/// its output.
struct Outcome {
    status: Option<std::process::ExitStatus>,
    stdout: String,
    stderr: String,
    report: String,
}

/// Runs a compiled C test under valgrind with `env`; any failed check, memory error or definite or
/// indirect leak (in the parent or a fork() child) fails the test, and so does a hang. Returns what
/// the test printed to stdout.
fn run(name: &str, env: &[(&str, &str)]) -> String {
    let _shared = TIMED.read().unwrap_or_else(|p| p.into_inner());
    run_now(name, env)
}

/// The keep-alive runs renew a 300 ms lease every 100 ms under valgrind, which runs a program's
/// threads one at a time and many times slower: a renewal that comes 200 ms late loses the lease.
/// So they run alone, while no other C test loads the machine; the others share.
static TIMED: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// [`run`] with the machine to itself (as far as this test binary goes).
fn run_alone(name: &str, env: &[(&str, &str)]) -> String {
    let _alone = TIMED.write().unwrap_or_else(|p| p.into_inner());
    run_now(name, env)
}

fn run_now(name: &str, env: &[(&str, &str)]) -> String {
    let Outcome {
        status,
        stdout,
        stderr,
        report,
    } = valgrind(name, env);
    let Some(status) = status else {
        panic!("tests/c/{name}.c hung for {RUN_LIMIT:?} and was killed:\n{report}");
    };
    assert!(
        status.success(),
        "tests/c/{name}.c failed ({status}):\n{report}"
    );
    // valgrind --quiet prints nothing unless it found something; a fork() child's report would
    // otherwise only show up here.
    assert!(
        !stderr.contains("=="),
        "valgrind reported problems in tests/c/{name}.c:\n{report}"
    );
    println!("{report}");
    stdout
}

fn valgrind(name: &str, env: &[(&str, &str)]) -> Outcome {
    let binary = compile(name);
    let logs = TempDir::new(&format!("ffi-{name}"));
    let (stdout_path, stderr_path) = (logs.path().join("stdout"), logs.path().join("stderr"));
    let mut child = Command::new("valgrind")
        .args([
            "--quiet",
            "--leak-check=full",
            "--show-leak-kinds=definite,indirect",
            "--errors-for-leak-kinds=definite,indirect",
            "--error-exitcode=99",
            "--track-origins=yes",
            // A thread that wakes (the keep-alive renewal) gets its turn promptly instead of whenever
            // valgrind's unfair default lets it.
            "--fair-sched=yes",
        ])
        .arg(&binary)
        .envs(env.iter().copied())
        .stdout(File::create(&stdout_path).expect("create stdout log"))
        .stderr(File::create(&stderr_path).expect("create stderr log"))
        // Its own process group, so a hung fork() child can be killed with it.
        .process_group(0)
        .spawn()
        .expect("run valgrind (it must be installed)");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for valgrind") {
            break Some(status);
        }
        if started.elapsed() > RUN_LIMIT {
            // SAFETY: kill(2) on the process group of a child we spawned and have not reaped.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = std::fs::read_to_string(&stdout_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let report = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    Outcome {
        status,
        stdout,
        stderr,
        report,
    }
}

fn file_url(dir: &TempDir) -> String {
    format!("file://{}", dir.path().display())
}

fn redis_url(server: &RedisServer) -> String {
    // Generous timeouts: everything runs several times slower under valgrind.
    server.url_with("io_timeout_ms=10000&connect_timeout_ms=10000")
}

/// The MySQL modes the C tests run in.
#[derive(Clone, Copy)]
enum MysqlMode {
    Named,
    Table,
}

/// A URL for the test binary's one MariaDB (starting it takes seconds, so the MySQL tests share it;
/// every C test uses keys of its own). Generous timeouts: everything runs several times slower
/// under valgrind.
fn mysql_url(mode: MysqlMode) -> String {
    let lock = match mode {
        MysqlMode::Named => "named",
        MysqlMode::Table => "table",
    };
    MariaDbServer::shared().url_with(&format!(
        "lock={lock}&io_timeout_ms=10000&connect_timeout_ms=10000"
    ))
}

/// The harness itself: a C program that leaks a lease and its client must fail under valgrind.
#[test]
fn a_leak_fails_the_run() {
    let dir = TempDir::new("ffi-canary");
    let outcome = valgrind("leak_canary", &[("LEASEHOLD_URL", &file_url(&dir))]);
    let status = outcome.status.expect("leak_canary hung");
    assert_eq!(
        status.code(),
        Some(99),
        "valgrind did not flag the leak:\n{}",
        outcome.report
    );
    assert!(
        outcome.stderr.contains("definitely lost"),
        "{}",
        outcome.report
    );
}

#[test]
fn happy_path_local() {
    let dir = TempDir::new("ffi-happy");
    run("happy_path", &[("LEASEHOLD_URL", &file_url(&dir))]);
}

#[test]
fn happy_path_redis() {
    let server = RedisServer::start();
    run("happy_path", &[("LEASEHOLD_URL", &redis_url(&server))]);
}

#[test]
fn shared_semaphores_restore_and_force_local() {
    let dir = TempDir::new("ffi-kinds");
    run("kinds", &[("LEASEHOLD_URL", &file_url(&dir))]);
}

#[test]
fn shared_semaphores_restore_and_force_redis() {
    let server = RedisServer::start();
    run("kinds", &[("LEASEHOLD_URL", &redis_url(&server))]);
}

#[test]
fn bad_inputs_fail_cleanly_and_leave_leases_intact() {
    let dir = TempDir::new("ffi-bad");
    let closed = free_port().to_string();
    run(
        "bad_input",
        &[
            ("LEASEHOLD_URL", &file_url(&dir)),
            ("LEASEHOLD_TEST_CLOSED_PORT", &closed),
        ],
    );
}

#[test]
fn bad_inputs_on_redis() {
    let server = RedisServer::start();
    let closed = free_port().to_string();
    run(
        "bad_input",
        &[
            ("LEASEHOLD_URL", &redis_url(&server)),
            ("LEASEHOLD_TEST_CLOSED_PORT", &closed),
        ],
    );
}

#[test]
fn two_threads_share_one_client_local() {
    let dir = TempDir::new("ffi-threads");
    run("threads", &[("LEASEHOLD_URL", &file_url(&dir))]);
}

#[test]
fn two_threads_share_one_client_redis() {
    let server = RedisServer::start();
    run("threads", &[("LEASEHOLD_URL", &redis_url(&server))]);
}

#[test]
fn fork_child_uses_inherited_client_local() {
    let dir = TempDir::new("ffi-fork");
    run("fork", &[("LEASEHOLD_URL", &file_url(&dir))]);
}

#[test]
fn fork_child_uses_inherited_client_redis() {
    let server = RedisServer::start();
    run("fork", &[("LEASEHOLD_URL", &redis_url(&server))]);
}

/// A server that accepts connections and never answers, for calls that must stay inside the
/// library until their I/O timeout. Lives as long as the returned listener's thread (the test).
fn silent_server() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let port = listener.local_addr().expect("local address").port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream); // kept open, never read or written
        }
    });
    format!("redis://127.0.0.1:{port}?connect_timeout_ms=5000&io_timeout_ms=5000")
}

#[test]
fn fork_while_another_thread_opens_a_persistent_client() {
    let dir = TempDir::new("ffi-fork-open");
    run(
        "fork_during_open",
        &[
            ("LEASEHOLD_URL", &file_url(&dir)),
            ("LEASEHOLD_SILENT_URL", &silent_server()),
        ],
    );
}

/// Where the C tests delete a lock underneath the library: the local backend's directory, or the
/// port of our own redis-server (for a raw DEL of the key's lock key, `leasehold:{<tag>}l:<key>`:
/// see tests/c/underneath.h).
fn underneath_local(dir: &TempDir) -> String {
    format!("dir:{}", dir.path().display())
}

fn underneath_redis(server: &RedisServer) -> String {
    format!("redis:{}", server.port())
}

#[test]
fn keep_alive_local() {
    let dir = TempDir::new("ffi-keepalive");
    run_alone(
        "keep_alive",
        &[
            ("LEASEHOLD_URL", &file_url(&dir)),
            ("LEASEHOLD_TEST_UNDERNEATH", &underneath_local(&dir)),
        ],
    );
}

#[test]
fn keep_alive_redis() {
    let server = RedisServer::start();
    run_alone(
        "keep_alive",
        &[
            ("LEASEHOLD_URL", &redis_url(&server)),
            ("LEASEHOLD_TEST_UNDERNEATH", &underneath_redis(&server)),
        ],
    );
}

/// The text between `begin` and `end` lines of a C test's output.
fn section<'a>(stdout: &'a str, begin: &str, end: &str) -> &'a str {
    let start = stdout.find(begin).expect("the section's start marker") + begin.len();
    let len = stdout[start..].find(end).expect("the section's end marker");
    &stdout[start..start + len]
}

/// The JSON parses (python3's json module, an independent parser) and has the documented shape.
fn check_stats_json(stdout: &str) {
    let json = section(stdout, "STATS_JSON ", "\n");
    let check = r#"
import json, sys
s = json.loads(sys.stdin.read())
counters = ["acquire_attempts", "acquired", "not_acquired", "releases_ok", "releases_lost",
            "extends_ok", "extends_lost", "expired", "keepalive_renewals", "keepalive_failures",
            "retries"]
assert all(isinstance(s[c], int) for c in counters), s
assert (s["acquired"], s["not_acquired"], s["releases_lost"], s["releases_ok"]) == (2, 1, 1, 1), s
assert set(s["errors"]) == {"not_acquired", "lost", "unavailable", "invalid_argument", "internal",
                          "interrupted", "stale_fence", "incomplete_attempt"}
for h in ("wait_seconds", "hold_seconds", "round_trip_seconds"):
    b = s[h]["buckets"]
    assert b[-1] == ["+Inf", s[h]["count"]], b
    assert all(b[i][1] <= b[i + 1][1] for i in range(len(b) - 1)), b
    assert isinstance(s[h]["sum"], (int, float))
"#;
    let mut child = Command::new("python3")
        .args(["-c", check])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("run python3");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(json.as_bytes())
        .expect("write the JSON");
    assert!(child.wait().expect("python3").success(), "bad JSON: {json}");
}

/// Every line is a `# HELP`/`# TYPE` comment or `name{labels} value` with a numeric value, and every
/// series is labelled with backend and prefix.
fn check_prometheus(text: &str, backend: &str) {
    let mut series = 0;
    for line in text.lines() {
        if line.starts_with("# HELP ") || line.starts_with("# TYPE ") {
            continue;
        }
        let (name_labels, value) = line.rsplit_once(' ').expect("name{labels} value");
        let (name, labels) = name_labels.split_once('{').expect("labels");
        assert!(
            name.starts_with("leasehold_")
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{line}"
        );
        assert!(labels.ends_with('}'), "{line}");
        assert!(
            labels.starts_with(&format!("backend=\"{backend}\",prefix=\"leasehold:\"")),
            "{line}"
        );
        assert!(value.parse::<f64>().is_ok(), "{line}");
        series += 1;
    }
    assert!(series > 20, "{text}");
}

#[test]
fn stats_and_metrics_local() {
    let dir = TempDir::new("ffi-stats");
    let stdout = run(
        "stats",
        &[
            ("LEASEHOLD_URL", &file_url(&dir)),
            ("LEASEHOLD_TEST_UNDERNEATH", &underneath_local(&dir)),
        ],
    );
    check_stats_json(&stdout);
    check_prometheus(section(&stdout, "METRICS_BEGIN\n", "METRICS_END"), "local");
}

#[test]
fn stats_and_metrics_redis() {
    let server = RedisServer::start();
    let stdout = run(
        "stats",
        &[
            ("LEASEHOLD_URL", &redis_url(&server)),
            ("LEASEHOLD_TEST_UNDERNEATH", &underneath_redis(&server)),
        ],
    );
    check_stats_json(&stdout);
    check_prometheus(section(&stdout, "METRICS_BEGIN\n", "METRICS_END"), "redis");
}

#[test]
fn persistent_clients_local() {
    let dir = TempDir::new("ffi-persistent");
    let closed = free_port().to_string();
    run(
        "persistent",
        &[
            ("LEASEHOLD_URL", &file_url(&dir)),
            ("LEASEHOLD_TEST_CLOSED_PORT", &closed),
        ],
    );
}

#[test]
fn persistent_clients_redis() {
    let server = RedisServer::start();
    let closed = free_port().to_string();
    run(
        "persistent",
        &[
            ("LEASEHOLD_URL", &redis_url(&server)),
            ("LEASEHOLD_TEST_CLOSED_PORT", &closed),
        ],
    );
}

/// Any C file that includes leasehold.h builds with `gcc -std=c11 -Wall -Werror` (here also
/// -Wextra -pedantic) and links with -lleasehold; and the header is valid C++ too.
#[test]
fn header_builds_with_strict_flags() {
    let root = workspace_dir();
    let out = build_dir();
    let lib = library_dir();
    let only_include = out.join("only_include.c");
    std::fs::write(
        &only_include,
        "#include \"leasehold.h\"\nint main(void) { return 0; }\n",
    )
    .expect("write only_include.c");
    for (source, binary) in [
        (only_include, out.join("only_include")),
        (root.join("tests/c/header_only.c"), out.join("header_only")),
    ] {
        let status = Command::new("gcc")
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic"])
            .arg("-I")
            .arg(root.join("include"))
            .arg(&source)
            .arg("-o")
            .arg(&binary)
            .arg(format!("-L{}", lib.display()))
            .arg("-lleasehold")
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .status()
            .expect("run gcc");
        assert!(
            status.success(),
            "gcc -std=c11 failed on {}",
            source.display()
        );
    }
    let status = Command::new(out.join("header_only"))
        .status()
        .expect("run header_only");
    assert!(status.success());
    let status = Command::new("g++")
        .args([
            "-std=c++11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-fsyntax-only",
            "-x",
            "c++",
        ])
        .arg("-I")
        .arg(root.join("include"))
        .arg(root.join("tests/c/header_only.c"))
        .status()
        .expect("run g++");
    assert!(status.success(), "the header does not compile as C++");
}

/// PHP's FFI::cdef accepts include/leasehold_ffi.h and can call through it.
#[test]
fn php_ffi_loads_the_ffi_header() {
    let header = workspace_dir().join("include/leasehold_ffi.h");
    let script = r#"
        $ffi = FFI::cdef(file_get_contents($argv[1]), $argv[2]);
        $out = $ffi->new("leasehold_client*");
        $status = $ffi->leasehold_client_open("", FFI::addr($out));
        if ($status !== $ffi->LEASEHOLD_INVALID_ARGUMENT) { fwrite(STDERR, "status $status\n"); exit(1); }
        // A returned `const char *` arrives as a PHP string (copied; the library keeps the original).
        echo $ffi->leasehold_version(), " ", $ffi->leasehold_last_error(), "\n";
    "#;
    let output = Command::new("php")
        .args(["-d", "ffi.enable=1", "-r", script])
        .arg(&header)
        .arg(library_dir().join("libleasehold.so"))
        .output()
        .expect("run php (the PHP CLI with the FFI extension must be installed)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("empty"),
        "php could not use {}:\n{stdout}\n{}",
        header.display(),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Numbers, not a check: what a lock cycle and the local accessors cost through the C ABI, without
/// valgrind. For optimized numbers run it in release:
/// `cargo test --release -p leasehold-ffi --test c_abi bench -- --ignored --nocapture`.
#[test]
#[ignore = "a benchmark; prints numbers"]
fn bench_c_abi() {
    let binary = compile("bench");
    let dir = TempDir::new("ffi-bench");
    let server = RedisServer::start();
    for url in [file_url(&dir), server.url()] {
        let output = Command::new(&binary)
            .env("LEASEHOLD_URL", &url)
            .output()
            .expect("run the benchmark");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        print!("{}", String::from_utf8_lossy(&output.stdout));
    }
}

/// tests/c/fuzz.c under valgrind: seeded random bytes, lengths and numbers at every entry point.
/// The seed is `LEASEHOLD_FUZZ_SEED` when set (to replay a failure), else the clock; it is printed
/// either way. `LEASEHOLD_FUZZ_CASES` changes the number of calls (3000 here; longer runs by hand).
fn fuzz(url: &str) {
    let seed = std::env::var("LEASEHOLD_FUZZ_SEED").unwrap_or_else(|_| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            .to_string()
    });
    let cases = std::env::var("LEASEHOLD_FUZZ_CASES").unwrap_or_else(|_| "3000".to_owned());
    eprintln!("C ABI fuzz: LEASEHOLD_FUZZ_SEED={seed} LEASEHOLD_FUZZ_CASES={cases} ({url})");
    let stdout = run(
        "fuzz",
        &[
            ("LEASEHOLD_URL", url),
            ("LEASEHOLD_FUZZ_SEED", &seed),
            ("LEASEHOLD_FUZZ_CASES", &cases),
        ],
    );
    assert!(stdout.contains("FUZZ_DONE"), "{stdout}");
    eprintln!("{}", stdout.trim());
}

#[test]
fn fuzz_entry_points_local() {
    let dir = TempDir::new("ffi-fuzz");
    fuzz(&file_url(&dir));
}

#[test]
fn fuzz_entry_points_redis() {
    let server = RedisServer::start();
    fuzz(&redis_url(&server));
}

#[test]
fn happy_path_mysql_named() {
    run(
        "happy_path",
        &[("LEASEHOLD_URL", &mysql_url(MysqlMode::Named))],
    );
}

#[test]
fn happy_path_mysql_table() {
    run(
        "happy_path",
        &[("LEASEHOLD_URL", &mysql_url(MysqlMode::Table))],
    );
}

#[test]
fn bad_inputs_on_mysql_named() {
    let closed = free_port().to_string();
    run(
        "bad_input",
        &[
            ("LEASEHOLD_URL", &mysql_url(MysqlMode::Named)),
            ("LEASEHOLD_TEST_CLOSED_PORT", &closed),
        ],
    );
}

#[test]
fn bad_inputs_on_mysql_table() {
    let closed = free_port().to_string();
    run(
        "bad_input",
        &[
            ("LEASEHOLD_URL", &mysql_url(MysqlMode::Table)),
            ("LEASEHOLD_TEST_CLOSED_PORT", &closed),
        ],
    );
}

/// Named locks are exclusive and belong to their session, so the backend documents (and the
/// README says) that shared locks and restore are refused with a pointer to `lock=table`; the C
/// test checks those refusals instead, and everything else (semaphores, force-release) as usual.
#[test]
fn semaphores_and_force_with_shared_and_restore_refused_mysql_named() {
    run(
        "kinds",
        &[
            ("LEASEHOLD_URL", &mysql_url(MysqlMode::Named)),
            ("LEASEHOLD_TEST_NO_SHARED", "1"),
            ("LEASEHOLD_TEST_NO_RESTORE", "1"),
            ("LEASEHOLD_TEST_REFUSAL_HINT", "lock=table"),
        ],
    );
}

#[test]
fn shared_semaphores_restore_and_force_mysql_table() {
    run("kinds", &[("LEASEHOLD_URL", &mysql_url(MysqlMode::Table))]);
}

#[test]
fn two_threads_share_one_client_mysql_named() {
    run(
        "threads",
        &[("LEASEHOLD_URL", &mysql_url(MysqlMode::Named))],
    );
}

#[test]
fn two_threads_share_one_client_mysql_table() {
    run(
        "threads",
        &[("LEASEHOLD_URL", &mysql_url(MysqlMode::Table))],
    );
}

#[test]
fn fork_child_uses_inherited_client_mysql_named() {
    run("fork", &[("LEASEHOLD_URL", &mysql_url(MysqlMode::Named))]);
}

#[test]
fn fork_child_uses_inherited_client_mysql_table() {
    run("fork", &[("LEASEHOLD_URL", &mysql_url(MysqlMode::Table))]);
}

#[test]
fn interrupt_ends_waits_local() {
    let dir = TempDir::new("ffi-interrupt");
    print!(
        "{}",
        run("interrupt", &[("LEASEHOLD_URL", &file_url(&dir))])
    );
}

#[test]
fn interrupt_ends_waits_mysql_named() {
    let url = mysql_url(MysqlMode::Named);
    print!("{}", run("interrupt", &[("LEASEHOLD_URL", &url)]));
}
