//! Execution: reads from the write buffer or the primaries, scans, and
//! buffered writes (FaRM §4 execution; FaRMv2 §4.7 early abort).

use super::{
    refused_for_configuration, AbortReason, GetStep, ScanState, ScanStep, Transaction, TxnError,
};
use meridian_wire::{Key, KeyRange, NodeId, Response, TxnRequest, TxnResponse, Value, Versioned};
use std::collections::BTreeMap;

impl Transaction {
    /// Read `key`: from the write buffer, or by a `Read` to its primary.
    ///
    /// Errors: `KeyTooLarge`, `TooManyOps`, `Aborted`/`Finished` if the
    /// transaction is over.
    pub fn get(&mut self, key: &[u8]) -> Result<GetStep, TxnError> {
        self.check_executing()?;
        self.check_key(key)?;
        if let Some(v) = self.writes.get(key) {
            return Ok(GetStep::Local(v.clone()));
        }
        let r = self.map.region_of(key);
        if self.opts.single_read {
            if self.single_read.is_some() {
                return Err(TxnError::SingleRead);
            }
            self.single_read = Some(None);
            return Ok(GetStep::Remote(
                r.primary,
                TxnRequest::ReadLatest {
                    region: r.id,
                    key: key.to_vec(),
                },
            ));
        }
        Ok(GetStep::Remote(
            r.primary,
            TxnRequest::Read {
                region: r.id,
                key: key.to_vec(),
                read_ts: self.read_ts,
            },
        ))
    }

    /// Consume the reply to the `Read` of `key`.
    ///
    /// Errors: `Aborted` on a conflict (the transaction is then aborted and
    /// holds no locks), `Protocol` on an unexpected reply.
    pub fn on_read_reply(
        &mut self,
        from: NodeId,
        key: &[u8],
        resp: Response,
    ) -> Result<Option<Versioned>, TxnError> {
        self.check_executing()?;
        match resp {
            Response::Txn(TxnResponse::Read(Ok(v))) => {
                let region = self.map.region_of(key).id;
                self.reads.insert(key.to_vec(), region);
                Ok(v)
            }
            Response::Txn(TxnResponse::ReadLatest(Ok(l))) if self.single_read == Some(None) => {
                let region = self.map.region_of(key).id;
                self.reads.insert(key.to_vec(), region);
                self.single_read = Some(Some(l.version));
                Ok(l.value.map(|value| Versioned {
                    version: l.version,
                    value,
                }))
            }
            Response::Txn(TxnResponse::Read(Err(c)) | TxnResponse::ReadLatest(Err(c))) => {
                Err(self.fail(AbortReason::Read(c)))
            }
            r if refused_for_configuration(&r) => Err(self.fail(AbortReason::Reconfigured)),
            other => Err(TxnError::Protocol {
                node: from,
                detail: format!("{other:?}"),
            }),
        }
    }

    /// Start a scan of `[start, end)` (`end = None`: to the end of the key
    /// space) for up to `limit` live pairs, in key order, including this
    /// transaction's own buffered writes. Returns the first request to send;
    /// pass its reply to [`Transaction::on_scan_reply`] until it returns
    /// [`ScanStep::Done`]. One scan at a time.
    ///
    /// The engine, not the driver, decides when a scan has enough rows: it
    /// reads regions in key order and stops only once the rows it has
    /// *covered* (stored rows merged with buffered writes, deletes removed)
    /// reach `limit`. A participant that returns fewer rows than asked with
    /// `more = true` (it clamps to `max_scan_rows`) is asked again from the
    /// next key of the same region. So every key below the last row returned
    /// was read and is validated; no gap is committed unvalidated.
    ///
    /// Errors: `KeyTooLarge`, `TooManyOps`, `Aborted`/`Finished`.
    pub fn scan(
        &mut self,
        start: &[u8],
        end: Option<&[u8]>,
        limit: u32,
    ) -> Result<ScanStep, TxnError> {
        self.check_executing()?;
        if self.opts.single_read {
            return Err(TxnError::SingleRead);
        }
        self.check_key(start)?;
        if let Some(e) = end {
            self.check_key(e)?;
        }
        let mut queue = std::collections::VecDeque::new();
        for r in self.map.regions() {
            let r_end = r.end.as_deref();
            let starts_before_end = end.is_none_or(|e| r.start.as_slice() < e);
            let ends_after_start = r_end.is_none_or(|re| re > start);
            if !(starts_before_end && ends_after_start) {
                continue;
            }
            let s = if r.start.as_slice() > start {
                r.start.clone()
            } else {
                start.to_vec()
            };
            let e = match (r_end, end) {
                (Some(a), Some(b)) => Some(if a < b { a.to_vec() } else { b.to_vec() }),
                (Some(a), None) => Some(a.to_vec()),
                (None, b) => b.map(|b| b.to_vec()),
            };
            if e.as_ref().is_some_and(|e| e.as_slice() <= s.as_slice()) {
                continue;
            }
            queue.push_back((r.id, r.primary, KeyRange { start: s, end: e }));
        }
        self.scan = Some(ScanState {
            start: start.to_vec(),
            end: end.map(|e| e.to_vec()),
            limit,
            rows: BTreeMap::new(),
            covered_end: Some(start.to_vec()),
            queue,
            inflight: None,
        });
        Ok(self.next_scan_step())
    }

    /// The merged rows of the covered prefix `[start, covered_end)`: stored
    /// rows plus buffered puts, minus buffered deletes.
    fn scan_merged(&self, st: &ScanState) -> BTreeMap<Key, Value> {
        let mut merged = st.rows.clone();
        let upper = match &st.covered_end {
            Some(e) => std::ops::Bound::Excluded(e.as_slice()),
            None => match &st.end {
                Some(e) => std::ops::Bound::Excluded(e.as_slice()),
                None => std::ops::Bound::Unbounded,
            },
        };
        for (k, v) in self
            .writes
            .range::<[u8], _>((std::ops::Bound::Included(st.start.as_slice()), upper))
        {
            match v {
                Some(v) => merged.insert(k.clone(), v.clone()),
                None => merged.remove(k),
            };
        }
        merged
    }

    fn next_scan_step(&mut self) -> ScanStep {
        let Some(mut st) = self.scan.take() else {
            return ScanStep::Done(Vec::new());
        };
        let merged = self.scan_merged(&st);
        let enough = merged.len() >= st.limit as usize;
        let next = if enough { None } else { st.queue.pop_front() };
        match next {
            None => {
                // Done: every key of [start, covered_end) was read (and will
                // be validated); the first `limit` merged rows are exact.
                ScanStep::Done(merged.into_iter().take(st.limit as usize).collect())
            }
            Some((region, node, range)) => {
                // Ask for enough rows to reach the limit even if buffered
                // deletes remove some; the participant may return fewer.
                let deletes = self
                    .writes
                    .iter()
                    .filter(|(k, v)| v.is_none() && range.contains(k))
                    .count();
                let want = (st.limit as usize - merged.len()).saturating_add(deletes);
                let want = want.clamp(1, self.limits.max_scan_rows.max(1) as usize) as u32;
                let req = TxnRequest::Scan {
                    region,
                    range: range.clone(),
                    limit: want,
                    read_ts: self.read_ts,
                };
                st.inflight = Some((region, node, range));
                self.scan = Some(st);
                ScanStep::Send(node, req)
            }
        }
    }

    /// Consume the reply to the scan request last returned. Records the range
    /// actually covered for phantom validation.
    ///
    /// Errors: `Aborted` on a conflict, `Protocol` on an unexpected reply or
    /// one from the wrong node.
    pub fn on_scan_reply(&mut self, from: NodeId, resp: Response) -> Result<ScanStep, TxnError> {
        self.check_executing()?;
        let Some((region, node, range)) = self.scan.as_mut().and_then(|s| s.inflight.take()) else {
            return Err(TxnError::Protocol {
                node: from,
                detail: "scan reply with no scan in flight".into(),
            });
        };
        if node != from {
            return Err(TxnError::Protocol {
                node: from,
                detail: format!("scan reply expected from {node}"),
            });
        }
        match resp {
            Response::Txn(TxnResponse::Scan(Ok((rows, more)))) => {
                if rows.iter().any(|(k, _)| !range.contains(k))
                    || rows.windows(2).any(|w| w[0].0 >= w[1].0)
                {
                    return Err(TxnError::Protocol {
                        node: from,
                        detail: "scan rows outside the range or out of order".into(),
                    });
                }
                let covered = match (more, rows.last()) {
                    // Cut short: covered up to and including the last key.
                    (true, Some((last, _))) => {
                        let mut succ = last.clone();
                        succ.push(0);
                        KeyRange {
                            start: range.start.clone(),
                            end: Some(succ),
                        }
                    }
                    (true, None) => {
                        return Err(TxnError::Protocol {
                            node: from,
                            detail: "scan reply with more = true and no rows".into(),
                        })
                    }
                    (false, _) => range.clone(),
                };
                self.scans.push((region, covered.clone()));
                let st = self.scan.as_mut().ok_or(TxnError::Finished)?;
                st.covered_end = covered.end.clone();
                st.rows.extend(rows.into_iter().map(|(k, v)| (k, v.value)));
                if more {
                    if let Some(e) = covered.end {
                        // Continue this region from the next key.
                        st.queue.push_front((
                            region,
                            node,
                            KeyRange {
                                start: e,
                                end: range.end,
                            },
                        ));
                    }
                }
                Ok(self.next_scan_step())
            }
            Response::Txn(TxnResponse::Scan(Err(c))) => Err(self.fail(AbortReason::Read(c))),
            r if refused_for_configuration(&r) => Err(self.fail(AbortReason::Reconfigured)),
            other => Err(TxnError::Protocol {
                node: from,
                detail: format!("{other:?}"),
            }),
        }
    }

    /// Buffer a write.
    ///
    /// Errors: `KeyTooLarge`, `ValueTooLarge`, `TooManyOps`, `ReadOnly`,
    /// `Aborted`/`Finished`.
    pub fn put(&mut self, key: Key, value: Value) -> Result<(), TxnError> {
        self.check_executing()?;
        self.check_key(&key)?;
        if value.len() > self.limits.max_value_bytes {
            return Err(TxnError::ValueTooLarge {
                len: value.len(),
                max: self.limits.max_value_bytes,
            });
        }
        if self.opts.read_only || self.opts.single_read {
            return Err(TxnError::ReadOnly);
        }
        self.writes.insert(key, Some(value));
        Ok(())
    }

    /// Buffer a delete.
    ///
    /// Errors: as [`Transaction::put`].
    pub fn delete(&mut self, key: Key) -> Result<(), TxnError> {
        self.check_executing()?;
        self.check_key(&key)?;
        if self.opts.read_only || self.opts.single_read {
            return Err(TxnError::ReadOnly);
        }
        self.writes.insert(key, None);
        Ok(())
    }
}
