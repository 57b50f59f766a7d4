//! The `once` records ([`RecordStore`]): `{prefix}record/{key}`, its value the writer's fence (8
//! bytes, big-endian) followed by the record's bytes, attached to an etcd lease of the record's
//! keep (whole seconds, rounded up), so a record ends by itself.
//!
//! A write is one transaction that needs no read first: etcd compares values bytewise, and a
//! value that starts with the big-endian fence is below `fence + 1` (8 bytes) exactly when its
//! fence is at most ours. So the transaction writes when the key is absent, or, in a nested
//! transaction, when the stored value is below `fence + 1`. The etcd lease the record left is
//! revoked after.

use crate::gateway::{b64, number, unb64, Resend};
use crate::EtcdBackend;
use leasehold_core::records::{Record, RecordStore};
use leasehold_core::{Key, Result, Ttl};
use serde_json::json;
use std::time::Duration;

fn record_key(prefix: &str, key: &Key) -> Vec<u8> {
    let mut name = format!("{prefix}record/").into_bytes();
    name.extend_from_slice(key.as_bytes());
    name
}

impl RecordStore for EtcdBackend {
    fn get(&self, key: &Key) -> Result<Option<Record>> {
        let answer = self.call(
            "/v3/kv/range",
            json!({"key": b64(&record_key(&self.prefix, key))}),
            Resend::Safe,
            self.call_deadline(),
        )?;
        let Some(kv) = answer["kvs"].as_array().and_then(|kvs| kvs.first()) else {
            return Ok(None);
        };
        let value = unb64(&kv["value"]);
        if value.len() < 8 {
            return Ok(None);
        }
        let (fence, value) = value.split_at(8);
        let fence = u64::from_be_bytes(fence.try_into().unwrap_or([0; 8]));
        Ok(Some(Record {
            fence,
            value: value.to_vec(),
        }))
    }

    fn put(&self, key: &Key, fence: u64, value: &[u8], keep: Duration) -> Result<bool> {
        let deadline = self.call_deadline();
        let name = b64(&record_key(&self.prefix, key));
        let mut stored = fence.to_be_bytes().to_vec();
        stored.extend_from_slice(value);
        let keep = Ttl::new(keep.max(Duration::from_millis(1)))?;
        let held = self.grant(keep, deadline)?;
        let put = json!({"request_put": {"key": name, "value": b64(&stored),
            "lease": held.lease.to_string(), "prev_kv": true}});
        let txn = json!({
            "compare": [{"key": name, "target": "CREATE", "result": "EQUAL",
                "create_revision": "0"}],
            "success": [put],
            "failure": [{"request_txn": {
                "compare": [{"key": name, "target": "VALUE", "result": "LESS",
                    "value": b64(&fence.saturating_add(1).to_be_bytes())}],
                "success": [put],
            }}],
        });
        // Sent twice, the second write finds the first one's equal fence and writes again: the
        // same record.
        let answer = match self.call("/v3/kv/txn", txn, Resend::Safe, deadline) {
            Ok(answer) => answer,
            Err(error) => {
                self.revoke(held.lease, deadline);
                return Err(error);
            }
        };
        let response = &answer["responses"][0];
        let (written, put_answer) = if answer["succeeded"].as_bool() == Some(true) {
            (true, &response["response_put"])
        } else {
            let inner = &response["response_txn"];
            (
                inner["succeeded"].as_bool() == Some(true),
                &inner["responses"][0]["response_put"],
            )
        };
        if !written {
            self.revoke(held.lease, deadline);
            return Ok(false);
        }
        if let Some(old) = number(&put_answer["prev_kv"]["lease"]).filter(|l| *l != 0) {
            self.revoke(old, deadline);
        }
        Ok(true)
    }
}
