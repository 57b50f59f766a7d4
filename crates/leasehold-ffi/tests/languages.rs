//! One key, workers in three languages: Rust (this test binary run again), C
//! (tests/c/section_worker.c, on this package's libleasehold.so) and PHP
//! (bindings/php/tests/fixtures/mutex-worker.php, on the same library) take turns at it on one
//! backend. Each logs its critical sections and increments a counter file with a racy
//! read-modify-write; together the logs must show no two holders at once and fences that strictly
//! increase across languages, and the counter no lost increment. A missing `php` or C compiler
//! fails the test: the point is all three languages.

use leasehold_testkit::processes::{
    self, check_sections, monotonic_ns, num, read_sections, var, Worker,
};
use leasehold_testkit::{ffi, unique_key, EtcdCluster, RedisServer, TempDir};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const LANGUAGES: [&str; 3] = ["rust", "c", "php"];
const WORKERS_PER_LANGUAGE: usize = 2;
const CYCLES: u64 = 100;

/// Not a test of its own: the Rust worker, with the PHP fixture's steps and log.
#[test]
fn child_worker() {
    let Some(mode) = processes::worker_mode() else {
        return;
    };
    assert_eq!(mode, "section", "unknown worker mode");
    let client = leasehold::connect(&processes::worker_url()).expect("connect");
    let (key, counter, start) = (var("KEY"), var("COUNTER"), var("START"));
    while !Path::new(&start).exists() {
        std::thread::sleep(Duration::from_millis(1));
    }
    // Logged at the end: writing inside the loop would only lengthen the sections.
    let mut log = String::new();
    for _ in 0..num("CYCLES") {
        let lease = client
            .acquire(&key, Duration::from_secs(30), Duration::from_secs(60))
            .expect("the key within the wait");
        let enter = monotonic_ns();
        let seen: u64 = std::fs::read_to_string(&counter)
            .expect("read the counter")
            .trim()
            .parse()
            .unwrap_or(0);
        std::fs::write(&counter, (seen + 1).to_string()).expect("write the counter");
        let fence = lease.fence();
        let exit = monotonic_ns();
        lease.release().expect("release");
        log.push_str(&format!("{enter} {exit} {fence}\n"));
    }
    std::fs::write(var("LOG"), log).expect("write the log");
}

/// A worker in `language`, working on `key` at `url` with the other files in `dir`; its log goes
/// to `log`. C and PHP take the PHP fixture's arguments.
fn start(language: &str, url: &str, key: &str, dir: &Path, log: &Path, cycles: u64) -> Worker {
    let (counter, go) = (dir.join("counter"), dir.join("go"));
    let args = [
        url.to_owned(),
        key.to_owned(),
        counter.display().to_string(),
        log.display().to_string(),
        go.display().to_string(),
        cycles.to_string(),
    ];
    match language {
        "rust" => {
            let names = ["KEY", "COUNTER", "LOG", "START", "CYCLES"];
            let vars: Vec<(&str, String)> = names.into_iter().zip(args[1..].to_vec()).collect();
            Worker::spawn("section", url, &vars)
        }
        "c" => {
            let mut c = Command::new(ffi::compile("section_worker"));
            c.args(args);
            Worker::start("c", c)
        }
        "php" => {
            let fixture = ffi::workspace_dir().join("bindings/php/tests/fixtures/mutex-worker.php");
            let mut php = Command::new("php");
            php.arg(fixture)
                .args(args)
                .env("LEASEHOLD_LIBRARY", ffi::library());
            Worker::start("php", php)
        }
        other => panic!("no worker in {other}"),
    }
}

fn languages_take_turns(backend: &str, url: &str) {
    languages_take_turns_for(backend, url, CYCLES)
}

/// [`languages_take_turns`] with `cycles` per worker.
fn languages_take_turns_for(backend: &str, url: &str, cycles: u64) {
    let dir = TempDir::new("languages");
    std::fs::write(dir.path().join("counter"), "0").expect("the counter file");
    let key = unique_key("languages");
    let mut workers: Vec<(&str, PathBuf, Worker)> = Vec::new();
    for language in LANGUAGES {
        for i in 0..WORKERS_PER_LANGUAGE {
            let log = dir.path().join(format!("{language}-{i}.log"));
            let worker = start(language, url, &key, dir.path(), &log, cycles);
            workers.push((language, log, worker));
        }
    }
    // Every worker connects before the race starts, so all languages contend from the first
    // cycle on (PHP takes longest to start); the checks below do not depend on it.
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(dir.path().join("go"), "").expect("the start file");
    let mut sections = Vec::new();
    for (language, log, worker) in &mut workers {
        worker.finish();
        sections.extend(read_sections(log, language));
    }

    let total = LANGUAGES.len() as u64 * WORKERS_PER_LANGUAGE as u64 * cycles;
    let check = check_sections(&sections);
    eprintln!(
        "{backend}: {} sections of {LANGUAGES:?} workers, the key changed language {} times",
        check.sections, check.handoffs
    );
    assert_eq!(check.sections as u64, total, "{backend}: sections lost");
    let problem = check.first_problem.unwrap_or_default();
    assert_eq!(
        check.overlaps, 0,
        "{backend}: overlapping critical sections: {problem}"
    );
    assert_eq!(
        check.fence_out_of_order, 0,
        "{backend}: the fence must strictly increase in the order of the sections: {problem}"
    );
    let counter = std::fs::read_to_string(dir.path().join("counter")).expect("the counter");
    assert_eq!(
        counter.trim(),
        total.to_string(),
        "{backend}: lost increments of the shared counter"
    );
    // The languages contended: one after another they would change the key's language twice;
    // taking turns, at most sections.
    assert!(
        check.handoffs as u64 >= total / 10,
        "{backend}: the key changed language only {} times",
        check.handoffs
    );
}

#[test]
fn rust_c_and_php_workers_share_one_key_on_local_files() {
    let dir = TempDir::new("languages-locks");
    languages_take_turns("local", &dir.file_url());
}

#[test]
fn rust_c_and_php_workers_share_one_key_on_redis() {
    let server = RedisServer::start();
    languages_take_turns("redis", &server.url());
}

/// etcd's fences (2^62 + a revision) are above every clock-drawn fence and still fit PHP's int and C's
/// `uint64_t`: each language reads the same rising sequence. Fewer cycles: every grant and release is
/// a write through Raft on three members.
#[test]
fn rust_c_and_php_workers_share_one_key_on_etcd() {
    let cluster = EtcdCluster::start();
    languages_take_turns_for("etcd", &cluster.url(), 25);
}
