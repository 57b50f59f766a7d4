//! What every acquire of a key takes, in one value: core's [`leasehold_core::ask::Ask`] (the key,
//! prefixed, and the TTL) with the pools the acquire runs on.

use crate::session::Pools;
use std::ops::Deref;

/// The pools and core's ask of one acquire: built once by the dispatch in lib.rs and handed to each
/// mode's acquire methods, so their parameter lists stay short.
pub(crate) struct Ask<'a> {
    pub pools: &'a Pools,
    ask: leasehold_core::ask::Ask<'a>,
}

impl<'a> Ask<'a> {
    pub fn new(pools: &'a Pools, ask: leasehold_core::ask::Ask<'a>) -> Ask<'a> {
        Ask { pools, ask }
    }
}

/// `ask.key`, `ask.prefixed` and `ask.ttl` read as core's fields: the pools only ride along.
impl<'a> Deref for Ask<'a> {
    type Target = leasehold_core::ask::Ask<'a>;

    fn deref(&self) -> &Self::Target {
        &self.ask
    }
}
