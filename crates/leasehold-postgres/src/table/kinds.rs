//! Table mode's shared locks, semaphores, promote and demote, restore and force-release.

use super::*;

/// Shared locks, semaphores, restore and force-release.
///
/// Shared holders: the key's row holds the token [`SHARED`], an `expires_at` no earlier than any
/// holder's, and the key's fence; each holder has a row of its own in the shares table (key, token,
/// fence, expires_at). A grant locks the key's row first (the `INSERT … ON CONFLICT DO UPDATE`),
/// so grants of both kinds are serialized per key and each draws the next fence of the one
/// per-key counter. An exclusive acquire is unchanged: it takes the row only once its
/// `expires_at` passed, that is once every share expired or left.
///
/// Writer preference: waiters (both kinds) queue on the key's wait-queue advisory lock, and a new
/// shared attempt that does not wait takes that lock in shared mode for its transaction
/// (`pg_try_advisory_xact_lock_shared`): refused while a waiter holds it or waits for it (the lock
/// manager counts waiting requests too). So once a writer waits, new readers queue behind it.
///
/// Semaphores: one row per permit in the permits table; a grant counts the live rows under a
/// transaction advisory lock of the semaphore's own (so two grants never count at once), reclaims
/// expired rows in the same statement, and draws a fence above every permit row's. Each row also
/// says the size it was granted under (`permits`), and a live row of another size refuses the
/// attempt (`InvalidArgument`), checked with the count under the same lock.
impl Table {
    /// The statements of one shared attempt, gated by the SQL boolean `gate`. The last statement
    /// gives the fence (NULL when not granted) and the exclusive holder's time left in ms.
    pub(super) fn shared_attempt(
        &self,
        key_hex: &str,
        token: Token,
        ttl: Ttl,
        gate: &str,
    ) -> String {
        format!(
            "INSERT INTO {t} AS l (key, token, expires_at) \
             SELECT decode('{key_hex}', 'hex'), '{SHARED}', clock_timestamp() + interval '1 millisecond' * {ms} \
             WHERE {gate} \
             ON CONFLICT (key) DO UPDATE \
               SET token = '{SHARED}', \
                   expires_at = CASE WHEN l.token = '{SHARED}' THEN l.expires_at ELSE EXCLUDED.expires_at END \
               WHERE l.token = '{SHARED}' OR l.expires_at <= clock_timestamp() \
             RETURNING set_config('leasehold.grant', '{token}', true); \
             WITH x AS (SELECT clock_timestamp() + interval '1 millisecond' * {ms} AS e), \
                  f AS (UPDATE {t} AS l SET \
                          fence = greatest(l.fence + 1, nextval({seq}::regclass), \
                                  floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint), \
                          expires_at = greatest(l.expires_at, x.e) \
                        FROM x WHERE l.key = decode('{key_hex}', 'hex') AND l.token = '{SHARED}' \
                          AND {GRANTED} = '{token}' \
                        RETURNING l.fence, x.e), \
                  swept AS (DELETE FROM {s} WHERE key = decode('{key_hex}', 'hex') \
                            AND expires_at <= clock_timestamp() AND EXISTS (SELECT 1 FROM f)), \
                  ins AS (INSERT INTO {s} (key, token, fence, expires_at) \
                          SELECT decode('{key_hex}', 'hex'), '{token}', fence, e FROM f RETURNING fence) \
             SELECT (SELECT fence FROM ins), \
                    (SELECT ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint \
                     FROM {t} WHERE key = decode('{key_hex}', 'hex'))",
            t = self.quoted,
            s = self.shares,
            seq = self.fence_seq,
            token = token.as_str(),
            ms = ttl.as_millis(),
        )
    }

    /// One permit attempt, gated by `gate`; the last statement gives the fence (NULL when not
    /// granted), the time left of the permit that expires first, in ms, and (column 3, also left in
    /// `leasehold.size` for the statements after it) the size of a live permit granted under
    /// another size than `permits`, or '': then nothing is granted. A grant counts and checks the
    /// sizes under the semaphore's count lock, so two sizes are never granted at once; a newcomer
    /// that is not gated is refused on what its snapshot saw, which was live then.
    pub(super) fn permit_attempt(
        &self,
        prefixed: &[u8],
        permits: Permits,
        token: Token,
        ttl: Ttl,
        gate: &str,
    ) -> String {
        let (count, _) = semaphore_internal("count", &self.name, prefixed);
        format!(
            "SELECT CASE WHEN {gate} THEN pg_advisory_xact_lock({count}) END; \
             WITH c AS (SELECT max(fence) AS top, \
                               count(*) FILTER (WHERE expires_at > clock_timestamp()) AS live, \
                               min(expires_at) FILTER (WHERE expires_at > clock_timestamp()) AS first, \
                               max(permits) FILTER (WHERE expires_at > clock_timestamp() \
                                                      AND permits <> {n}) AS other \
                        FROM {p} WHERE key = decode('{key_hex}', 'hex')), \
                  gone AS (DELETE FROM {p} WHERE key = decode('{key_hex}', 'hex') \
                           AND expires_at <= clock_timestamp() AND {gate}), \
                  ins AS (INSERT INTO {p} (key, token, fence, expires_at, permits) \
                          SELECT decode('{key_hex}', 'hex'), '{token}', \
                                 greatest(coalesce(c.top, 0) + 1, nextval({seq}::regclass), \
                                          floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint), \
                                 clock_timestamp() + interval '1 millisecond' * {ms}, {n} \
                          FROM c WHERE {gate} AND c.live < {n} AND c.other IS NULL RETURNING fence) \
             SELECT (SELECT fence FROM ins), \
                    (SELECT ceil(extract(epoch FROM first - clock_timestamp()) * 1000)::bigint FROM c), \
                    set_config('leasehold.grant', \
                               CASE WHEN EXISTS (SELECT 1 FROM ins) THEN '{token}' ELSE '' END, true), \
                    set_config('leasehold.size', coalesce((SELECT other FROM c)::text, ''), true)",
            p = self.permits,
            key_hex = hex(prefixed),
            seq = self.fence_seq,
            token = token.as_str(),
            ms = ttl.as_millis(),
            n = permits.get(),
        )
    }

    pub fn try_acquire_shared(&self, ask: &Ask) -> Result<RawLease> {
        let (queue, _) = wait_queue(&self.name, &ask.prefixed);
        let gate = format!("pg_try_advisory_xact_lock_shared({queue})");
        self.try_once(ask.pools, ask.key, ask.ttl, LeaseKind::Shared, |token| {
            self.shared_attempt(&hex(&ask.prefixed), token, ask.ttl, &gate)
        })
    }

    pub fn try_acquire_permit(&self, ask: &Ask, permits: Permits) -> Result<RawLease> {
        self.try_once(
            ask.pools,
            ask.key,
            ask.ttl,
            LeaseKind::Permit(permits),
            |token| self.permit_attempt(&ask.prefixed, permits, token, ask.ttl, "true"),
        )
    }

    pub(super) fn try_once(
        &self,
        pools: &Pools,
        key: &Key,
        ttl: Ttl,
        kind: LeaseKind,
        attempt: impl Fn(Token) -> String,
    ) -> Result<RawLease> {
        let token = Token::generate()?;
        let sql = self.bounded(&attempt(token));
        let deadline = pools.call();
        let (mut conn, result) = timed(pools, deadline, |s| s.statements(&sql, deadline))?;
        let (sent, statements) = result.map_err(|e| pools.failed("acquire", &e))?;
        self.maybe_sweep(&mut conn, deadline);
        if let Some(refusal) = size_refusal(key, statements.last(), kind)? {
            return Err(refusal);
        }
        match number::<i64>(fence_of(&statements))? {
            Some(fence) => Ok(new_lease(key, token, fence, ttl, sent, kind)),
            None => Err(refused(key, kind)),
        }
    }

    /// One attempt to turn a shared lease exclusive. Under the key's row lock (which every grant
    /// takes first, so the next statement's snapshot sees every share granted before), the row
    /// becomes this token's, with a fence drawn as an exclusive acquire draws it, only while this
    /// token's share is live and no other share is; the key's shares go with it, so none is left
    /// behind. Nothing changes otherwise. The last statement says whether the share was ours and
    /// the new fence; a row already ours (a retry of a try that committed) counts as promoted.
    pub fn try_promote(&self, pools: &Pools, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        check_owner(lease)?;
        let key_hex = hex(&lease.key().prefixed(&self.prefix));
        let sql = format!(
            "SELECT 1 FROM {t} WHERE key = decode('{key_hex}', 'hex') FOR UPDATE; \
             WITH c AS (SELECT \
                          EXISTS (SELECT 1 FROM {s} WHERE key = decode('{key_hex}', 'hex') \
                                  AND token = '{token}' AND expires_at > clock_timestamp()) AS mine, \
                          NOT EXISTS (SELECT 1 FROM {s} WHERE key = decode('{key_hex}', 'hex') \
                                      AND token <> '{token}' AND expires_at > clock_timestamp()) AS alone), \
                  p AS (UPDATE {t} AS l SET token = '{token}', \
                          expires_at = clock_timestamp() + interval '1 millisecond' * {ms}, \
                          fence = greatest(l.fence + 1, nextval({seq}::regclass), \
                                  floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint) \
                        FROM c WHERE l.key = decode('{key_hex}', 'hex') AND l.token = '{SHARED}' \
                          AND c.mine AND c.alone \
                        RETURNING l.fence), \
                  gone AS (DELETE FROM {s} WHERE key = decode('{key_hex}', 'hex') \
                           AND EXISTS (SELECT 1 FROM p)), \
                  already AS (SELECT fence FROM {t} WHERE key = decode('{key_hex}', 'hex') \
                              AND token = '{token}' AND expires_at > clock_timestamp()) \
             SELECT c.mine OR EXISTS (SELECT 1 FROM already), \
                    coalesce((SELECT fence FROM p), (SELECT fence FROM already)) FROM c",
            t = self.quoted,
            s = self.shares,
            seq = self.fence_seq,
            token = lease.token().as_str(),
            ms = ttl.as_millis(),
        );
        let deadline = pools.call();
        let (_conn, result) = timed(pools, deadline, |s| {
            s.statements(&self.bounded(&sql), deadline)
        })?;
        let (sent, statements) = result.map_err(|e| pools.failed("promote", &e))?;
        let rows = statements.last().map(Vec::as_slice).unwrap_or_default();
        if last_value(rows, 0) != Some("t") {
            return Err(Error::Lost(
                "the key no longer holds this lease's token (expired, or released)".into(),
            ));
        }
        let Some(fence) = number::<u64>(last_value(rows, 1))? else {
            return Err(held_elsewhere(lease.key()));
        };
        lease.set_kind(LeaseKind::Exclusive);
        lease.set_fence(fence);
        lease.renewed(ttl, sent);
        Ok(())
    }

    /// Turns an exclusive lease shared in one statement: the key's row, while it is this token's
    /// and live, becomes the shared holders' row (fence kept) and the token gets a share with the
    /// same fence and expiry, in the same transaction, so the key never looks free. A share of
    /// this token already there (a retry of a try that committed) counts as demoted.
    pub fn demote(&self, pools: &Pools, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        check_owner(lease)?;
        let prefixed = lease.key().prefixed(&self.prefix);
        let key_hex = hex(&prefixed);
        // Readers queued for the key may join now.
        let (_, channel) = wait_queue(&self.name, &prefixed);
        let sql = format!(
            "WITH d AS (UPDATE {t} SET token = '{SHARED}', \
                          expires_at = clock_timestamp() + interval '1 millisecond' * {ms} \
                        WHERE key = decode('{key_hex}', 'hex') AND token = '{token}' \
                          AND expires_at > clock_timestamp() \
                        RETURNING key, fence, expires_at), \
                  ins AS (INSERT INTO {s} (key, token, fence, expires_at) \
                          SELECT key, '{token}', fence, expires_at FROM d \
                          ON CONFLICT (key, token) DO UPDATE \
                            SET fence = EXCLUDED.fence, expires_at = EXCLUDED.expires_at \
                          RETURNING fence), \
                  already AS (SELECT s.fence FROM {s} s JOIN {t} l ON l.key = s.key \
                              WHERE s.key = decode('{key_hex}', 'hex') AND s.token = '{token}' \
                                AND s.expires_at > clock_timestamp() AND l.token = '{SHARED}') \
             SELECT coalesce((SELECT fence FROM ins), (SELECT fence FROM already)), \
                    pg_notify('{channel}', '')",
            t = self.quoted,
            s = self.shares,
            token = lease.token().as_str(),
            ms = ttl.as_millis(),
        );
        let deadline = pools.call();
        let (_conn, result) = timed(pools, deadline, |s| s.rows(&self.bounded(&sql), deadline))?;
        let (sent, rows) = result.map_err(|e| pools.failed("demote", &e))?;
        if number::<u64>(last_value(&rows, 0))?.is_none() {
            return Err(Error::Lost(
                "the key no longer holds this lease's token (expired, or taken by another holder)"
                    .into(),
            ));
        }
        lease.set_kind(LeaseKind::Shared);
        lease.renewed(ttl, sent);
        Ok(())
    }

    pub(super) fn release_shared(&self, pools: &Pools, lease: &mut RawLease) -> Result<()> {
        let prefixed = lease.key().prefixed(&self.prefix);
        let key_hex = hex(&prefixed);
        let (_, channel) = wait_queue(&self.name, &prefixed);
        // The key's row is locked first, so the statements after it (fresh snapshots) see every
        // share granted before; the row's expiry then becomes the latest of the shares left.
        let sql = format!(
            "SELECT 1 FROM {t} WHERE key = decode('{key_hex}', 'hex') FOR UPDATE; \
             WITH gone AS (DELETE FROM {s} WHERE key = decode('{key_hex}', 'hex') AND token = '{token}' \
                           RETURNING expires_at > clock_timestamp() AS live) \
             SELECT live FROM gone; \
             UPDATE {t} SET expires_at = coalesce( \
                 (SELECT max(expires_at) FROM {s} WHERE key = decode('{key_hex}', 'hex')), clock_timestamp()) \
             WHERE key = decode('{key_hex}', 'hex') AND token = '{SHARED}'; \
             SELECT pg_notify('{channel}', '')",
            t = self.quoted,
            s = self.shares,
            token = lease.token().as_str()
        );
        let deadline = pools.call();
        let (mut conn, result) = with_session(pools, deadline, |s| {
            s.statements(&self.bounded(&sql), deadline)
        })?;
        let statements = result.map_err(|e| pools.failed("release", &e))?;
        let n = statements.len();
        let live = statements
            .get(n.wrapping_sub(3))
            .and_then(|rows| last_value(rows, 0))
            .map(|v| v == "t");
        self.maybe_sweep(&mut conn, deadline);
        lost_unless(live)
    }

    pub(super) fn release_permit(&self, pools: &Pools, lease: &mut RawLease) -> Result<()> {
        let prefixed = lease.key().prefixed(&self.prefix);
        let (_, channel) = semaphore_internal("queue", &self.name, &prefixed);
        let sql = format!(
            "WITH gone AS (DELETE FROM {p} WHERE key = decode('{}', 'hex') AND token = '{}' \
                           RETURNING expires_at > clock_timestamp() AS live) \
             SELECT live, pg_notify('{channel}', '') FROM gone",
            hex(&prefixed),
            lease.token().as_str(),
            p = self.permits,
        );
        let deadline = pools.call();
        let (mut conn, rows) = call_rows(pools, deadline, &self.bounded(&sql), "release")?;
        self.maybe_sweep(&mut conn, deadline);
        lost_unless(last_value(&rows, 0).map(|v| v == "t"))
    }

    pub(super) fn extend_shared(
        &self,
        pools: &Pools,
        lease: &mut RawLease,
        ttl: Ttl,
    ) -> Result<()> {
        let key_hex = hex(&lease.key().prefixed(&self.prefix));
        let sql = format!(
            "SELECT 1 FROM {t} WHERE key = decode('{key_hex}', 'hex') FOR UPDATE; \
             WITH e AS (UPDATE {s} SET expires_at = clock_timestamp() + interval '1 millisecond' * {ms} \
                        WHERE key = decode('{key_hex}', 'hex') AND token = '{token}' \
                          AND expires_at > clock_timestamp() RETURNING expires_at) \
             UPDATE {t} AS l SET expires_at = greatest(l.expires_at, e.expires_at) FROM e \
             WHERE l.key = decode('{key_hex}', 'hex') AND l.token = '{SHARED}' RETURNING l.fence",
            t = self.quoted,
            s = self.shares,
            ms = ttl.as_millis(),
            token = lease.token().as_str()
        );
        self.extend_with(pools, lease, ttl, &sql)
    }

    pub(super) fn extend_permit(
        &self,
        pools: &Pools,
        lease: &mut RawLease,
        ttl: Ttl,
    ) -> Result<()> {
        let prefixed = lease.key().prefixed(&self.prefix);
        let (count, _) = semaphore_internal("count", &self.name, &prefixed);
        // Under the count lock: an acquirer counting at the moment of expiry must not see the
        // permit expired while this extend keeps it.
        let sql = format!(
            "SELECT pg_advisory_xact_lock({count}); \
             UPDATE {p} SET expires_at = clock_timestamp() + interval '1 millisecond' * {ms} \
             WHERE key = decode('{}', 'hex') AND token = '{}' AND expires_at > clock_timestamp() \
             RETURNING fence",
            hex(&prefixed),
            lease.token().as_str(),
            p = self.permits,
            ms = ttl.as_millis(),
        );
        self.extend_with(pools, lease, ttl, &sql)
    }

    fn extend_with(&self, pools: &Pools, lease: &mut RawLease, ttl: Ttl, sql: &str) -> Result<()> {
        let deadline = pools.call();
        let (_conn, result) = timed(pools, deadline, |s| {
            s.statements(&self.bounded(sql), deadline)
        })?;
        let (sent, statements) = result.map_err(|e| pools.failed("extend", &e))?;
        if statements.last().is_none_or(|rows| rows.is_empty()) {
            return Err(Error::Lost(
                "the key no longer holds this lease's token (expired, or released)".into(),
            ));
        }
        lease.renewed(ttl, sent);
        Ok(())
    }

    pub fn inspect_permits(&self, pools: &Pools, prefixed: &[u8]) -> Result<KeyInfo> {
        let sql = format!(
            "SELECT count(*) FILTER (WHERE expires_at > clock_timestamp()), \
                    greatest(0, floor(extract(epoch FROM max(expires_at) - clock_timestamp()) * 1000))::bigint, \
                    max(fence) \
             FROM {} WHERE key = decode('{}', 'hex')",
            self.permits,
            hex(prefixed)
        );
        let deadline = pools.call();
        let (_conn, rows) = call_rows(pools, deadline, &self.bounded(&sql), "inspect")?;
        let Some(row) = rows.last() else {
            return Ok(KeyInfo::new(false, None, None));
        };
        let holders = number::<u32>(row.get(0))?.unwrap_or(0);
        let remaining = number::<u64>(row.get(1))?.map(Duration::from_millis);
        let fence = number::<u64>(row.get(2))?;
        let info = KeyInfo::new(holders > 0, remaining.filter(|_| holders > 0), fence);
        Ok(if holders > 0 {
            info.with_holders(holders, false)
        } else {
            info
        })
    }

    /// One statement: the token's row, exclusive or shared, if it is still live, with its fence
    /// and the time left by the server's clock.
    pub fn restore(
        &self,
        pools: &Pools,
        prefixed: &[u8],
        key: &Key,
        token: Token,
    ) -> Result<RawLease> {
        let left = "floor(extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint";
        let sql = format!(
            "SELECT false, fence, {left} FROM {t} \
               WHERE key = decode('{k}', 'hex') AND token = '{token}' AND expires_at > clock_timestamp() \
             UNION ALL \
             SELECT true, fence, {left} FROM {s} \
               WHERE key = decode('{k}', 'hex') AND token = '{token}' AND expires_at > clock_timestamp()",
            t = self.quoted,
            s = self.shares,
            k = hex(prefixed),
            token = token.as_str()
        );
        let deadline = pools.call();
        let (_conn, result) = timed(pools, deadline, |s| s.rows(&self.bounded(&sql), deadline))?;
        let (sent, rows) = result.map_err(|e| pools.failed("restore", &e))?;
        let Some(row) = rows.first() else {
            return Err(Error::Lost(format!(
                "key \"{key}\" is not held by that token (expired, released or never taken)"
            )));
        };
        let fence = number::<u64>(row.get(1))?.unwrap_or(0);
        let left_us = number::<u64>(row.get(2))?.unwrap_or(0);
        let kind = if row.get(0) == Some("t") {
            LeaseKind::Shared
        } else {
            LeaseKind::Exclusive
        };
        Ok(owned(
            RawLease::restored(
                key.clone(),
                token,
                fence,
                Duration::from_micros(left_us),
                sent,
            )
            .with_kind(kind),
        ))
    }

    /// Frees the key whoever holds it, shared holders too. The key's row stays (free, with its
    /// fence), so the next grant's fence is still above it.
    pub fn force_release(&self, pools: &Pools, prefixed: &[u8]) -> Result<bool> {
        let (_, channel) = wait_queue(&self.name, prefixed);
        let sql = format!(
            "WITH o AS (SELECT key, expires_at > clock_timestamp() AS live FROM {t} \
                        WHERE key = decode('{k}', 'hex') FOR UPDATE), \
                  m AS (UPDATE {t} AS l SET token = '{FREED}', expires_at = clock_timestamp() \
                        FROM o WHERE l.key = o.key RETURNING o.live), \
                  s AS (DELETE FROM {s} WHERE key = decode('{k}', 'hex') \
                        RETURNING expires_at > clock_timestamp() AS live) \
             SELECT coalesce((SELECT bool_or(live) FROM m), false) \
                    OR coalesce((SELECT bool_or(live) FROM s), false), \
                    pg_notify('{channel}', '')",
            t = self.quoted,
            s = self.shares,
            k = hex(prefixed),
        );
        let deadline = pools.call();
        let (_conn, rows) = call_rows(pools, deadline, &self.bounded(&sql), "force release")?;
        Ok(last_value(&rows, 0) == Some("t"))
    }
}
