//! Fences from the cluster's revisions.
//!
//! Every write to an etcd cluster gets the next revision, a counter agreed by the majority through
//! Raft: it rises across leader changes and the loss of any minority of members by construction, no
//! clock involved. A grant's fence is the revision of the write that made the holder's key, its
//! `create_revision`, which an extend keeps.
//!
//! The other backends draw fences from a clock, `max(stored + 1, server µs since 1970)` (about
//! 1.8·10^15 in 2026). A revision alone would be far below those, so a store gated by another
//! backend's fences would refuse every etcd fence after a switch. The fence is therefore
//! [`BASE`] + revision: above every clock-drawn fence (server µs reach 2^62 in the year
//! 148 000), and below 2^63, so it stays a positive signed 64-bit integer (PHP's `int`, SQL's
//! `BIGINT`). The switch back, from etcd to a clock-drawn backend, is not covered: its fences are
//! below etcd's, and the gate refuses them until its records are cleared.

/// What every etcd fence is above: 2^62.
pub const BASE: u64 = 1 << 62;

/// The fence of a grant whose write got `revision`.
pub(crate) fn of_revision(revision: i64) -> u64 {
    BASE.saturating_add(u64::try_from(revision).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn above_clock_fences_and_below_the_signed_limit() {
        let year_3000_us: u64 = 32_503_680_000 * 1_000_000;
        assert!(of_revision(1) > year_3000_us);
        assert!(of_revision(i64::MAX >> 2) < i64::MAX as u64);
        assert!(of_revision(8) > of_revision(7));
    }
}
