//! The fault harness checks itself: the checker reports each violation it claims to find (on
//! hand-written histories and a deliberately unfenced store) and nothing on a clean history; the proxy
//! does each fault to a real redis-server.

use leasehold_testkit::checker::allowance::STRANDED_SLACK;
use leasehold_testkit::checker::drift;
use leasehold_testkit::{
    check, Catalogue, CheckConfig, Fault, FaultProxy, FencedStore, History, Mode, Op, Outcome,
    RedisServer, Schedule, Snapshot, Stall,
};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
const BOUND: Duration = Duration::from_millis(600);

fn acq(worker: usize, ttl_ms: u64, at: u64, done: Option<u64>, outcome: Outcome) -> Op {
    Op::acquire(worker, "k", ms(ttl_ms), Duration::ZERO, BOUND).at(at, done, outcome)
}

fn rel(worker: usize, lease: usize, at: u64, done: u64, outcome: Outcome) -> Op {
    Op::release(worker, "k", lease, BOUND).at(at, Some(done), outcome)
}

/// Two workers taking turns properly, with an extend, a refusal while held, writes, and a lease that
/// expired on its own before the next holder.
fn clean_ops() -> Vec<Op> {
    vec![
        acq(0, 100, 0, Some(5), Outcome::Ok).with_fence(10), // #0
        Op::write(0, "k", Some(0), 10).at(6, Some(6), Outcome::Ok),
        Op::extend(0, "k", 0, ms(100), BOUND).at(50, Some(55), Outcome::Ok),
        acq(1, 100, 60, Some(61), Outcome::NotAcquired), // refused while #0 holds: fine
        rel(0, 0, 120, 125, Outcome::Ok),                // #4
        acq(1, 50, 121, Some(130), Outcome::Ok).with_fence(11), // #5: after #0's release began
        Op::write(1, "k", Some(5), 11).at(131, Some(131), Outcome::Ok),
        // #5 never released: it expires at 121 + 50 − drift.
        acq(0, 100, 200, Some(210), Outcome::Ok).with_fence(12), // #7
        Op::write(0, "k", Some(7), 12).at(211, Some(211), Outcome::Ok),
        rel(0, 7, 250, 251, Outcome::Ok),
    ]
}

#[test]
fn a_clean_history_has_no_findings() {
    let r = check(&Snapshot::of(clean_ops()), &CheckConfig::default());
    assert!(r.is_clean(), "{r}");
    assert_eq!(r.acquired, 3);
    assert_eq!(r.not_acquired, 1);
    assert_eq!(r.writes_accepted, 3);
}

#[test]
fn overlapping_windows_are_reported() {
    let mut ops = clean_ops();
    // Worker 2 gets the key while #0 (ok at 5, ttl 100, extended at 50) is still valid.
    ops.push(acq(2, 100, 20, Some(30), Outcome::Ok).with_fence(20));
    let r = check(&Snapshot::of(ops), &CheckConfig::default());
    assert_eq!(r.overlaps.count, 1, "{r}");
    assert!(r.overlaps.examples[0].contains("w2"), "{r}");
}

#[test]
fn a_window_ends_at_the_conservative_expiry() {
    // #0 was invoked at 0 with a 100 ms TTL: valid until 100 − drift(100 ms) = 97 ms.
    let end = (ms(100) - drift(ms(100))).as_millis() as u64;
    let next = |at| {
        vec![
            acq(0, 100, 0, Some(5), Outcome::Ok).with_fence(1),
            acq(1, 100, at - 1, Some(at), Outcome::Ok).with_fence(2),
        ]
    };
    let fine = check(&Snapshot::of(next(end)), &CheckConfig::default());
    assert_eq!(fine.overlaps.count, 0, "{fine}");
    let early = check(&Snapshot::of(next(end - 1)), &CheckConfig::default());
    assert_eq!(early.overlaps.count, 1, "{early}");
}

/// The fake backend whose fence repeats (a Redis counter lost in a restart) and goes backwards.
#[test]
fn repeated_and_backward_fences_are_reported() {
    let ops = vec![
        acq(0, 50, 0, Some(1), Outcome::Ok).with_fence(7),
        rel(0, 0, 10, 11, Outcome::Ok),
        acq(1, 50, 20, Some(21), Outcome::Ok).with_fence(7), // repeats
        rel(1, 2, 30, 31, Outcome::Ok),
        acq(0, 50, 40, Some(41), Outcome::Ok).with_fence(3), // backwards
    ];
    let r = check(&Snapshot::of(ops), &CheckConfig::default());
    assert_eq!(r.fence_order.count, 2, "{r}");
    assert_eq!(r.overlaps.count, 0, "{r}");
}

#[test]
fn concurrent_acquisitions_may_get_fences_in_either_order() {
    // Invoked together; the one granted second may carry the smaller fence: not a violation.
    let ops = vec![
        acq(0, 50, 0, Some(5), Outcome::Ok).with_fence(9),
        rel(0, 0, 6, 7, Outcome::Ok),
        acq(1, 50, 1, Some(8), Outcome::Ok).with_fence(8),
    ];
    let r = check(&Snapshot::of(ops), &CheckConfig::default());
    assert!(r.is_clean(), "{r}");
}

/// The deliberately unfenced write path: the old holder, back from a pause, writes after the new
/// holder. The unfenced store takes it and the checker says so; the fenced store refuses it.
#[test]
fn an_unfenced_store_accepting_a_stale_write_is_reported() {
    for (store, stale) in [(FencedStore::unfenced(), 1), (FencedStore::new(), 0)] {
        let h = History::new();
        let a = h.invoke(Op::acquire(0, "k", ms(20), Duration::ZERO, BOUND));
        h.ok(a, Some(1));
        std::thread::sleep(ms(30)); // paused past its TTL
        let b = h.invoke(Op::acquire(1, "k", ms(20), Duration::ZERO, BOUND));
        h.ok(b, Some(2));
        assert!(store.write_recorded(&h, 1, "k", Some(b), 2));
        let accepted = store.write_recorded(&h, 0, "k", Some(a), 1);
        assert_eq!(accepted, !store.is_fenced());
        let r = check(&h.snapshot(), &CheckConfig::default());
        assert_eq!(r.stale_writes.count, stale, "{r}");
        assert_eq!(r.writes_rejected, 1 - stale, "{r}");
        assert_eq!(r.overlaps.count, 0, "{r}");
        assert_eq!(store.highest("k"), Some(2));
    }
}

#[test]
fn calls_past_their_bound_are_reported_and_hangs_too() {
    let ops = vec![
        acq(0, 50, 0, Some(600), Outcome::Unknown), // exactly the bound: fine
        acq(1, 50, 0, Some(601), Outcome::Unknown),
        acq(2, 50, 0, None, Outcome::Pending), // still running at the end (1000 ms)
        acq(3, 50, 1000, Some(1000), Outcome::NotAcquired),
    ];
    let r = check(&Snapshot::of(ops), &CheckConfig::default());
    assert_eq!(r.bound_overruns.count, 2, "{r}");
    assert_eq!(r.pending, 1);
}

#[test]
fn a_call_past_its_bound_only_by_the_machines_stall_is_not_a_violation() {
    let ops = vec![
        acq(0, 50, 0, Some(800), Outcome::Unknown), // 200 ms past, 250 ms stalled meanwhile
        acq(1, 50, 0, Some(900), Outcome::Unknown), // 300 ms past: more than the stall
        acq(2, 50, 700, Some(1400), Outcome::Unknown), // 100 ms past, stall before it began
    ];
    let mut snapshot = Snapshot::of(ops);
    snapshot.stalls = vec![Stall {
        start: Duration::from_millis(300),
        end: Duration::from_millis(550),
    }];
    let r = check(&snapshot, &CheckConfig::default());
    assert_eq!(r.bound_overruns.count, 2, "{r}");
    assert_eq!(r.stalled_overruns.count, 1, "{r}");
    assert_eq!(r.longest_stall, Duration::from_millis(250));
}

#[test]
fn a_lease_stranded_after_an_unknown_outcome_is_reported() {
    let slack = STRANDED_SLACK.as_millis() as u64;
    let ops = |refused_at: u64| {
        vec![
            // The acquire timed out: it may or may not have taken the key for 100 ms.
            acq(0, 100, 0, Some(400), Outcome::Unknown),
            acq(
                1,
                100,
                refused_at,
                Some(refused_at + 1),
                Outcome::NotAcquired,
            ),
        ]
    };
    let within = check(
        &Snapshot::of(ops(400 + 100 + slack - 1)),
        &CheckConfig::default(),
    );
    assert_eq!(within.stranded.count, 0, "{within}");
    // Only the acquire nobody learned the outcome of explains the refusal: a cost, not stranded.
    assert_eq!(within.late_grants.count, 1, "{within}");
    assert!(within.is_clean(), "{within}");
    let later = check(
        &Snapshot::of(ops(400 + 100 + slack + 1)),
        &CheckConfig::default(),
    );
    assert_eq!(later.stranded.count, 1, "{later}");
    assert!(later.stranded.examples[0].contains("unsettled"), "{later}");
    // A holder whose release failed as Unknown keeps the key possibly held until its TTL runs out.
    let released_unknown = vec![
        acq(0, 100, 0, Some(1), Outcome::Ok).with_fence(1),
        rel(0, 0, 10, 400, Outcome::Unknown),
        acq(1, 100, 450, Some(460), Outcome::NotAcquired),
    ];
    let r = check(&Snapshot::of(released_unknown), &CheckConfig::default());
    assert_eq!(r.stranded.count, 0, "{r}");
}

/// A release that says `Lost` is the client's verdict: the server may free the key only when it
/// sees the holder's session close (PostgreSQL advisory, seen in CI), so the key counts as possibly
/// held until the lease's TTL plus the slack, and no longer; a successful release settles at once.
#[test]
fn a_lost_release_settles_the_key_only_at_the_ttl() {
    let slack = STRANDED_SLACK.as_millis() as u64;
    let ops = |release: Outcome, refused_at: u64| {
        vec![
            acq(0, 100, 0, Some(1), Outcome::Ok).with_fence(1),
            rel(0, 0, 10, 11, release),
            acq(
                1,
                100,
                refused_at,
                Some(refused_at + 5),
                Outcome::NotAcquired,
            ),
        ]
    };
    let config = CheckConfig::default();
    let soon = check(&Snapshot::of(ops(Outcome::Lost, 20)), &config);
    assert_eq!(soon.stranded.count, 0, "{soon}");
    let late = check(
        &Snapshot::of(ops(Outcome::Lost, 1 + 100 + slack + 1)),
        &config,
    );
    assert_eq!(late.stranded.count, 1, "{late}");
    assert!(
        late.stranded.examples[0].contains("last hold ended"),
        "{late}"
    );
    let released = check(&Snapshot::of(ops(Outcome::Ok, 20)), &config);
    assert_eq!(released.stranded.count, 1, "{released}");
}

fn acq_as(worker: usize, mode: Mode, at: u64, done: u64) -> Op {
    Op::acquire(worker, "k", ms(100), Duration::ZERO, BOUND)
        .with_mode(mode)
        .at(at, Some(done), Outcome::Ok)
}

/// The reviewers' case: the history says the lease ran out at 97 ms (so the derived windows do
/// not overlap), but its holder's `remaining()` still said 9.5 s when another client got the key.
#[test]
fn a_believed_overlap_the_window_check_misses_is_reported() {
    let ops = vec![
        acq(0, 100, 0, Some(1), Outcome::Ok).with_fence(1),
        acq(1, 100, 200, Some(201), Outcome::Ok).with_fence(2),
    ];
    let r = check(
        &Snapshot::of(ops).with_beliefs(&[(0, 1, 9501), (0, 150, 9500), (1, 201, 298)]),
        &CheckConfig::default(),
    );
    assert_eq!(r.overlaps.count, 0, "{r}");
    assert_eq!(r.believed_overlaps.count, 1, "{r}");
    assert!(r.believed_overlaps.examples[0].contains("w1"), "{r}");
    assert!(!r.is_clean());
}

/// Every client session ended by someone else (an administrator's kill) frees a session-held
/// lease at once: another client's grant after the kill began is no overlap, and what the holder
/// believed before the kill counts only until then; a belief read after the kill began, while
/// another client holds the key, is a believed overlap (its holder did not see its session end).
#[test]
fn a_session_ended_by_someone_else_ends_the_lease_and_later_beliefs_are_judged_when_read() {
    // The kill ran from 100 to 102; the other client, whose acquire began meanwhile, was granted
    // the key at 120 on a new session (its release is answered after the kill: its session
    // outlived it); the first holder's release finds its lease lost.
    let ops = || {
        vec![
            acq(0, 10_000, 0, Some(1), Outcome::Ok).with_fence(1),
            acq(1, 10_000, 100, Some(120), Outcome::Ok).with_fence(2),
            rel(1, 1, 300, 301, Outcome::Ok),
            rel(0, 0, 400, 401, Outcome::Lost),
        ]
    };
    let seen = Snapshot::of(ops())
        .with_session_end(100, 102)
        .with_beliefs(&[(0, 1, 9_900), (0, 110, 110), (0, 150, 150), (1, 120, 9_000)]);
    let r = check(&seen, &CheckConfig::default());
    assert!(r.is_clean(), "{r}");
    // Without the recorded kill, both checks see the first lease go on: the kill is what ends it.
    let r = check(
        &Snapshot::of(ops()).with_beliefs(&[(0, 1, 9_900), (1, 120, 9_000)]),
        &CheckConfig::default(),
    );
    assert_eq!(r.overlaps.count, 1, "{r}");
    // A holder that still believes after the kill, while the other holds the key.
    let unseen = Snapshot::of(ops())
        .with_session_end(100, 102)
        .with_beliefs(&[
            (0, 1, 9_900),
            (0, 110, 9_800),
            (0, 150, 9_800),
            (1, 120, 9_000),
        ]);
    let r = check(&unseen, &CheckConfig::default());
    assert_eq!(r.overlaps.count, 0, "{r}");
    assert_eq!(r.believed_overlaps.count, 1, "{r}");
    // Read after the kill but before the other's grant: it held then (the session's end had not
    // reached it yet), and is relied on no longer.
    let early = Snapshot::of(ops())
        .with_session_end(100, 102)
        .with_beliefs(&[(0, 1, 9_900), (0, 110, 9_800), (1, 120, 9_000)]);
    let r = check(&early, &CheckConfig::default());
    assert!(r.is_clean(), "{r}");
    // A relay held every chunk 100 ms while the kill ran: the goodbye reached the holder by 202 ms
    // at the latest, so what it read before is its travel time; what it read after is not.
    let held = |at| {
        Snapshot::of(ops())
            .with_held_session_end(100, 102, 100)
            .with_beliefs(&[(0, 1, 9_900), (0, at, 9_800), (1, 120, 9_000)])
    };
    let r = check(&held(150), &CheckConfig::default());
    assert!(r.is_clean(), "{r}");
    let r = check(&held(210), &CheckConfig::default());
    assert_eq!(r.believed_overlaps.count, 1, "{r}");
}

/// A belief ends where the holder starts giving the lease back, and where its next belief starts
/// (an extend to a shorter TTL): neither is an overlap.
#[test]
fn beliefs_end_at_the_release_and_at_the_next_belief() {
    let released = vec![
        acq(0, 100, 0, Some(1), Outcome::Ok).with_fence(1),
        rel(0, 0, 50, 51, Outcome::Ok),
        acq(1, 100, 60, Some(61), Outcome::Ok).with_fence(2),
    ];
    let r = check(
        &Snapshot::of(released).with_beliefs(&[(0, 1, 98), (2, 61, 158)]),
        &CheckConfig::default(),
    );
    assert!(r.is_clean(), "{r}");
    let shortened = vec![
        acq(0, 100, 0, Some(1), Outcome::Ok).with_fence(1),
        Op::extend(0, "k", 0, ms(20), BOUND).at(10, Some(11), Outcome::Ok),
        acq(1, 100, 40, Some(41), Outcome::Ok).with_fence(2),
    ];
    let r = check(
        &Snapshot::of(shortened).with_beliefs(&[(0, 1, 98), (0, 11, 28), (2, 41, 138)]),
        &CheckConfig::default(),
    );
    assert!(r.is_clean(), "{r}");
}

/// An extend with a shorter TTL may run as soon as it is sent: while it is in flight, its holder
/// relies on the lease only until that TTL from the send (the client shortens `remaining()` when it
/// sends it), so a grant to another client after that is no overlap; before it, it is.
#[test]
fn an_extend_in_flight_ends_the_belief_at_its_own_ttl() {
    let history = |granted_at: u64| {
        vec![
            acq(0, 100, 0, Some(1), Outcome::Ok).with_fence(1),
            Op::extend(0, "k", 0, ms(20), BOUND).at(10, Some(500), Outcome::Unknown),
            acq(1, 100, granted_at, Some(granted_at + 1), Outcome::Ok).with_fence(2),
        ]
    };
    let beliefs = |granted_at: u64| [(0, 1, 98), (2, granted_at + 1, granted_at + 90)];
    let after = check(
        &Snapshot::of(history(40)).with_beliefs(&beliefs(40)),
        &CheckConfig::default(),
    );
    assert_eq!(after.believed_overlaps.count, 0, "{after}");
    let before = check(
        &Snapshot::of(history(20)).with_beliefs(&beliefs(20)),
        &CheckConfig::default(),
    );
    assert_eq!(before.believed_overlaps.count, 1, "{before}");
}

/// Readers may overlap one another, never a writer; in both checks.
#[test]
fn shared_leases_overlap_each_other_but_not_an_exclusive_one() {
    let readers = vec![
        acq_as(0, Mode::Shared, 0, 1),
        acq_as(1, Mode::Shared, 10, 11),
    ];
    let r = check(
        &Snapshot::of(readers.clone()).with_beliefs(&[(0, 1, 90), (1, 11, 100)]),
        &CheckConfig::default(),
    );
    assert!(r.is_clean(), "{r}");
    let mut writer = readers;
    writer.push(acq_as(2, Mode::Exclusive, 20, 21).with_fence(5));
    let r = check(
        &Snapshot::of(writer).with_beliefs(&[(0, 1, 90), (1, 11, 100), (2, 21, 110)]),
        &CheckConfig::default(),
    );
    assert_eq!(r.overlaps.count, 2, "{r}");
    assert_eq!(r.believed_overlaps.count, 2, "{r}");
}

/// A reader promoted while another reader still holds is an overlap (in the windows and in what
/// the holders believed); promoted after the other left, or demoted before a reader joins, it is
/// not. The promote's fence is an exclusive grant's: one not above an earlier grant's is reported.
#[test]
fn a_promote_beside_a_reader_is_an_overlap_and_a_demote_lets_readers_in() {
    let promote = |at: u64, done: u64, outcome: Outcome| {
        Op::promote(0, "k", 0, ms(100), ms(50), BOUND).at(at, Some(done), outcome)
    };
    let demote =
        |at: u64, done: u64| Op::demote(0, "k", 0, ms(100), BOUND).at(at, Some(done), Outcome::Ok);
    let clean = check(
        &Snapshot::of(vec![
            acq_as(0, Mode::Shared, 0, 1).with_fence(1), // #0
            acq_as(1, Mode::Shared, 2, 3),               // #1
            rel(1, 1, 10, 11, Outcome::Ok),
            promote(5, 12, Outcome::Ok).with_fence(2), // granted once #1 left
            demote(40, 41),
            acq_as(2, Mode::Shared, 42, 43), // joins the demoted lease
            rel(0, 0, 60, 61, Outcome::Ok),
        ])
        .with_beliefs(&[
            (0, 1, 60),
            (1, 3, 10),
            (0, 12, 60),
            (0, 41, 60),
            (5, 43, 90),
        ]),
        &CheckConfig::default(),
    );
    assert!(clean.is_clean(), "{clean}");

    // The promote granted while #1 still held (and believed it held).
    let beside = check(
        &Snapshot::of(vec![
            acq_as(0, Mode::Shared, 0, 1).with_fence(1),
            acq_as(1, Mode::Shared, 2, 3),
            promote(5, 6, Outcome::Ok).with_fence(2),
            rel(1, 1, 10, 11, Outcome::Ok),
            rel(0, 0, 60, 61, Outcome::Ok),
        ])
        .with_beliefs(&[(0, 1, 60), (1, 3, 10), (0, 6, 60)]),
        &CheckConfig::default(),
    );
    assert_eq!(beside.overlaps.count, 1, "{beside}");
    assert_eq!(beside.believed_overlaps.count, 1, "{beside}");

    // A reader let in before the demote was sent.
    let early = check(
        &Snapshot::of(vec![
            acq_as(0, Mode::Shared, 0, 1).with_fence(1),
            promote(5, 6, Outcome::Ok).with_fence(2),
            acq_as(1, Mode::Shared, 20, 21),
            demote(30, 31),
            rel(0, 0, 60, 61, Outcome::Ok),
        ])
        .with_beliefs(&[(0, 1, 60), (0, 6, 60), (2, 21, 60)]),
        &CheckConfig::default(),
    );
    assert_eq!(early.overlaps.count, 1, "{early}");
    assert_eq!(early.believed_overlaps.count, 1, "{early}");

    // A promote's fence not above an exclusive grant that completed before it began.
    let fences = check(
        &Snapshot::of(vec![
            acq_as(1, Mode::Exclusive, 0, 1).with_fence(5),
            rel(1, 0, 2, 3, Outcome::Ok),
            acq_as(0, Mode::Shared, 4, 5).with_fence(5),
            Op::promote(0, "k", 2, ms(100), ms(50), BOUND)
                .at(6, Some(7), Outcome::Ok)
                .with_fence(4),
        ]),
        &CheckConfig::default(),
    );
    assert_eq!(fences.fence_order.count, 1, "{fences}");
}

/// A semaphore of 2 permits: two at once are fine, a third is one too many.
#[test]
fn more_permits_than_the_semaphore_has_are_reported() {
    let two = vec![
        acq_as(0, Mode::Permit(2), 0, 1),
        acq_as(1, Mode::Permit(2), 10, 11),
    ];
    let beliefs = [(0, 1, 90), (1, 11, 100), (2, 21, 110)];
    let r = check(
        &Snapshot::of(two.clone()).with_beliefs(&beliefs[..2]),
        &CheckConfig::default(),
    );
    assert!(r.is_clean(), "{r}");
    let mut three = two;
    three.push(acq_as(2, Mode::Permit(2), 20, 21));
    let r = check(
        &Snapshot::of(three).with_beliefs(&beliefs),
        &CheckConfig::default(),
    );
    assert_eq!(r.overlaps.count, 1, "{r}");
    assert_eq!(r.believed_overlaps.count, 1, "{r}");
}

/// A Redlock grant that came back with no validity left is refused as it must be: a cost, not a
/// stranded refusal, and what the quorum granted may block the next caller until its TTL.
#[test]
fn a_refusal_with_no_validity_left_is_a_cost() {
    let ops = vec![
        acq(0, 20, 0, Some(300), Outcome::NoValidity),
        acq(1, 100, 310, Some(311), Outcome::NotAcquired),
    ];
    let r = check(&Snapshot::of(ops), &CheckConfig::default());
    assert_eq!(r.no_validity.count, 1, "{r}");
    assert_eq!(r.stranded.count, 0, "{r}");
    assert_eq!(r.late_grants.count, 1, "{r}");
    assert!(r.is_clean(), "{r}");
}

/// Fence order binds exclusive grants only: readers may share a fence.
#[test]
fn fence_order_judges_exclusive_grants_only() {
    let ops = vec![
        acq_as(0, Mode::Shared, 0, 1).with_fence(7),
        acq_as(1, Mode::Shared, 10, 11).with_fence(7),
    ];
    let r = check(&Snapshot::of(ops), &CheckConfig::default());
    assert_eq!(r.fence_order.count, 0, "{r}");
}

#[test]
fn the_summary_line_names_every_violation_kind() {
    let mut ops = clean_ops();
    // An intruder with a high fence: it overlaps #0, and the later grants' fences fall below it.
    ops.push(acq(2, 100, 20, Some(30), Outcome::Ok).with_fence(20));
    let r = check(&Snapshot::of(ops), &CheckConfig::default());
    assert_eq!(
        r.summary_line(),
        "violations: 3 (overlaps 1, believed-overlaps 0, fence-order 2, stale-writes 0, past-bound 0)"
    );
    assert!(r.to_string().starts_with(&r.summary_line()));
}

/// The schedule is the seed's: the same seed draws the same one, and faults on one resource never
/// overlap.
#[test]
fn a_schedule_is_replayable_and_keeps_resources_apart() {
    let mut catalogue = Catalogue::new();
    for name in ["a", "b"] {
        catalogue.add(name, "server", ms(500), ms(100), ms(400), ms(50), |_, _| {
            String::new()
        });
    }
    catalogue.add("c", "net", ms(300), ms(10), ms(200), ms(0), |_, _| {
        String::new()
    });
    let one = Schedule::draw(&catalogue, 42, ms(20_000), ms(2000));
    assert_eq!(one, Schedule::draw(&catalogue, 42, ms(20_000), ms(2000)));
    assert_ne!(one, Schedule::draw(&catalogue, 43, ms(20_000), ms(2000)));
    let server: Vec<_> = one.events.iter().filter(|e| e.spec < 2).collect();
    assert!(server.len() > 5, "{one}");
    for pair in server.windows(2) {
        assert!(
            pair[0].start + pair[0].duration + ms(50) <= pair[1].start,
            "{pair:?}"
        );
    }
    assert!(one
        .events
        .iter()
        .all(|e| e.start + e.duration <= ms(18_000)));
}

// ---- the proxy, against a real redis-server ----

fn resp(cmd: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", cmd.len()).into_bytes();
    for a in cmd {
        out.extend(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

/// Sends one command through `addr`, returns the reply (or "" on a timeout / closed connection).
fn send(addr: &str, cmd: &[&str], timeout: Duration) -> String {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return String::new();
    };
    s.set_read_timeout(Some(timeout)).unwrap();
    if s.write_all(&resp(cmd)).is_err() {
        return String::new();
    }
    read_reply(&mut s)
}

fn read_reply(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while !got.ends_with(b"\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[test]
fn the_proxy_does_each_fault() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let addr = proxy.host_port();
    let short = Duration::from_millis(300);
    assert_eq!(send(&addr, &["PING"], short), "+PONG\r\n");

    // Reply dropped, request delivered: the client sees nothing, the server did it.
    proxy.set(Fault::DropReplies);
    assert_eq!(send(&addr, &["SET", "dropped", "1"], short), "");
    assert!(server.command(&[b"GET", b"dropped"]).contains('1'));

    // Black hole: nothing reaches the server.
    proxy.set(Fault::BlackHole);
    assert_eq!(send(&addr, &["SET", "holed", "1"], short), "");
    assert!(server.command(&[b"EXISTS", b"holed"]).starts_with(":0"));

    proxy.set(Fault::Latency(Duration::from_millis(100)));
    let t = Instant::now();
    assert_eq!(send(&addr, &["PING"], Duration::from_secs(2)), "+PONG\r\n");
    assert!(
        t.elapsed() >= Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );

    // "+PONG\r\n" is 7 bytes, dripped 20 ms apart (and the 14-byte request before it).
    proxy.set(Fault::SlowDrip(Duration::from_millis(20)));
    let t = Instant::now();
    assert_eq!(send(&addr, &["PING"], Duration::from_secs(2)), "+PONG\r\n");
    assert!(
        t.elapsed() >= Duration::from_millis(140),
        "{:?}",
        t.elapsed()
    );

    // Replies only: the request goes through at once, "+PONG\r\n" trickles in 20 ms a byte.
    proxy.set(Fault::SlowDripReplies(Duration::from_millis(20)));
    let t = Instant::now();
    assert_eq!(send(&addr, &["PING"], Duration::from_secs(2)), "+PONG\r\n");
    assert!(
        t.elapsed() >= Duration::from_millis(120),
        "{:?}",
        t.elapsed()
    );

    proxy.set(Fault::Refuse);
    assert_eq!(send(&addr, &["PING"], short), "");

    // Reset: an open connection breaks, new ones work (the fault is back to normal).
    proxy.heal();
    let mut open = TcpStream::connect(&addr).unwrap();
    open.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    open.write_all(&resp(&["PING"])).unwrap();
    assert_eq!(read_reply(&mut open), "+PONG\r\n");
    assert!(proxy.open_connections() >= 1);
    proxy.reset_all();
    let t = Instant::now();
    let _ = open.write_all(&resp(&["PING"]));
    assert_eq!(read_reply(&mut open), "");
    assert!(t.elapsed() < Duration::from_secs(1));
    assert_eq!(send(&addr, &["PING"], short), "+PONG\r\n");

    // Dropping the proxy ends every connection and thread at once, even one held open mid-fault.
    let mut held = TcpStream::connect(&addr).unwrap();
    held.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    proxy.set(Fault::BlackHole);
    held.write_all(&resp(&["PING"])).unwrap();
    let t = Instant::now();
    drop(proxy);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert_eq!(read_reply(&mut held), "");
    assert!(TcpStream::connect(&addr).is_err());
}

#[test]
fn a_server_that_is_gone_closes_the_clients_connection() {
    let mut server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    server.kill();
    let t = Instant::now();
    assert_eq!(
        send(&proxy.host_port(), &["PING"], Duration::from_secs(2)),
        ""
    );
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
}

/// A reader refused after a writer gave up waiting, with nobody holding the key: stranded, unless
/// the backend's waiting writer marks the key for longer than its wait (`writer_mark`, MySQL table
/// mode), and only within that mark.
#[test]
fn a_reader_refused_behind_a_writer_that_gave_up_is_stranded_past_the_writer_mark() {
    let ops = |refused_at: u64| {
        vec![
            acq_as(0, Mode::Exclusive, 0, 1).with_fence(1),
            rel(0, 0, 50, 51, Outcome::Ok),
            // A writer that waited from 20 to 40 and gave up.
            Op::acquire(1, "k", ms(100), ms(20), BOUND).at(20, Some(40), Outcome::NotAcquired),
            Op::acquire(2, "k", ms(100), Duration::ZERO, BOUND)
                .with_mode(Mode::Shared)
                .at(refused_at, Some(refused_at + 1), Outcome::NotAcquired),
        ]
    };
    let marked = CheckConfig {
        writer_mark: ms(1000),
        ..CheckConfig::default()
    };
    let plain = check(&Snapshot::of(ops(500)), &CheckConfig::default());
    assert_eq!(plain.stranded.count, 1, "{plain}");
    let within = check(&Snapshot::of(ops(500)), &marked);
    assert_eq!(within.stranded.count, 0, "{within}");
    let past = check(&Snapshot::of(ops(1100)), &marked);
    assert_eq!(past.stranded.count, 1, "{past}");
}
