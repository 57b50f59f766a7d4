//! What promotes and demotes make of a lease's mode over time. A lease is surely exclusive from an
//! exclusive grant's completion (its acquire's, or a successful promote's) until its holder starts
//! to demote it; at any other time it is counted as what it surely is at least, shared: a promote
//! in flight may not have run yet, and a demote sent may have run already. The exclusion checks
//! split a lease's span at those moments, so they charge it with exclusivity exactly where its
//! holder could rely on it.

use super::exclusion::Span;
use crate::history::{Mode, Op, OpId, OpKind, Outcome};
use std::time::Duration;

/// `span` (of a lease whose operations are `related`, in invocation order) cut where a promote or
/// demote changed its kind: exclusive where it surely was, shared elsewhere. A lease that never
/// swapped keeps its acquire's mode.
pub(crate) fn by_kind(ops: &[Op], related: &[OpId], span: Span) -> Vec<Span> {
    match exclusive_spells(ops, span.lease, related) {
        Some(spells) => split(span, &spells),
        None => vec![span],
    }
}

/// When the lease of the acquire `lease` was surely exclusive, or `None` when it never swapped
/// kinds (its span keeps its acquire's mode). `related` are its operations in invocation order.
fn exclusive_spells(
    ops: &[Op],
    lease: OpId,
    related: &[OpId],
) -> Option<Vec<(Duration, Duration)>> {
    let swaps = |i: &&OpId| matches!(ops[**i].kind, OpKind::Promote | OpKind::Demote);
    if !related.iter().any(|i| swaps(&i)) {
        return None;
    }
    let mut spells = Vec::new();
    let mut from = (ops[lease].mode == Mode::Exclusive).then_some(Duration::ZERO);
    for op in related.iter().filter(swaps).map(|&i| &ops[i]) {
        match (op.kind, op.outcome) {
            (OpKind::Demote, _) => {
                if let Some(f) = from.take() {
                    spells.push((f, op.invoke));
                }
            }
            (OpKind::Promote, Outcome::Ok) if from.is_none() => from = op.complete,
            _ => {}
        }
    }
    if let Some(f) = from {
        spells.push((f, Duration::MAX));
    }
    Some(spells)
}

/// `span` cut at the edges of `spells`: exclusive inside them, shared outside.
fn split(span: Span, spells: &[(Duration, Duration)]) -> Vec<Span> {
    let mut out = Vec::new();
    let mut at = span.start;
    let piece = |start, end, mode| Span {
        start,
        end,
        mode,
        ..span
    };
    for &(from, to) in spells {
        let (from, to) = (from.max(at), to.min(span.end));
        if from >= to {
            continue;
        }
        if at < from {
            out.push(piece(at, from, Mode::Shared));
        }
        out.push(piece(from, to, Mode::Exclusive));
        at = to;
    }
    if at < span.end {
        out.push(piece(at, span.end, Mode::Shared));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_promoted_reader_is_exclusive_from_the_grant_until_it_demotes() {
        let ops = vec![
            Op::acquire(0, "k", ms(100), ms(0), ms(1000))
                .with_mode(Mode::Shared)
                .at(0, Some(1), Outcome::Ok),
            Op::promote(0, "k", 0, ms(100), ms(10), ms(1000)).at(10, Some(20), Outcome::Ok),
            Op::demote(0, "k", 0, ms(100), ms(1000)).at(40, Some(45), Outcome::Ok),
        ];
        let spells = exclusive_spells(&ops, 0, &[1, 2]).unwrap();
        assert_eq!(spells, vec![(ms(20), ms(40))]);
        let span = Span {
            start: ms(1),
            end: ms(90),
            lease: 0,
            mode: Mode::Shared,
        };
        let modes: Vec<_> = split(span, &spells)
            .iter()
            .map(|s| (s.start, s.end, s.mode))
            .collect();
        assert_eq!(
            modes,
            vec![
                (ms(1), ms(20), Mode::Shared),
                (ms(20), ms(40), Mode::Exclusive),
                (ms(40), ms(90), Mode::Shared)
            ]
        );
    }

    #[test]
    fn a_refused_promote_leaves_a_reader_and_a_lease_without_swaps_is_left_alone() {
        let ops = vec![
            Op::acquire(0, "k", ms(100), ms(0), ms(1000))
                .with_mode(Mode::Shared)
                .at(0, Some(1), Outcome::Ok),
            Op::promote(0, "k", 0, ms(100), ms(10), ms(1000)).at(
                10,
                Some(20),
                Outcome::NotAcquired,
            ),
        ];
        assert_eq!(exclusive_spells(&ops, 0, &[1]), Some(vec![]));
        assert_eq!(exclusive_spells(&ops, 0, &[]), None);
    }
}
