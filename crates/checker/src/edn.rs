//! Export to Jepsen's EDN history format, in the rw-register form Elle reads
//! (`elle.rw-register`, e.g. `elle-cli --model rw-register`).

use std::io::{self, Write};

use crate::history::{History, Outcome, TxnRecord};

/// Renders `h` as a Jepsen EDN history (one op map per line).
pub fn to_edn(h: &History) -> String {
    let mut buf = Vec::new();
    // Writing into a Vec cannot fail, and the output is pure ASCII.
    if write_edn(h, &mut buf).is_err() {
        return String::new();
    }
    String::from_utf8(buf).unwrap_or_default()
}

/// Writes `h` as a Jepsen EDN history: for each transaction an `:invoke` op
/// at `invoke_ns` and a completion op at `complete_ns` (`:ok`, `:fail` or
/// `:info`), all sorted by time, one map per line, with sequential `:index`.
///
/// Micro-ops are listed reads first, then writes (the record does not keep
/// their interleaving). Invocations carry `nil` read values; completions
/// carry the values read, including `:fail` and `:info` ones (Elle ignores
/// those).
///
/// At equal times invocations precede completions, matching the checker's
/// strict `complete < invoke` real-time order, except that a session's
/// completion precedes the same session's next invocation.
pub fn write_edn(h: &History, w: &mut impl Write) -> io::Result<()> {
    let mut out = io::BufWriter::with_capacity(1 << 16, w);
    let events = ordered_events(h);
    for (index, &(time, phase, i)) in events.iter().enumerate() {
        let t = &h.txns[i as usize];
        let ty = match (phase, t.outcome) {
            (INVOKE, _) => ":invoke",
            (_, Outcome::Committed) => ":ok",
            (_, Outcome::Aborted) => ":fail",
            (_, Outcome::Unknown) => ":info",
        };
        write!(out, "{{:type {ty}, :f :txn, :value ")?;
        write_value(&mut out, t, phase == INVOKE)?;
        writeln!(
            out,
            ", :process {}, :time {time}, :index {index}}}",
            t.process
        )?;
    }
    out.flush()
}

const INVOKE: u8 = 0;
const COMPLETE: u8 = 1;

/// All invocation and completion events as `(time, phase, txn)`, in output
/// order.
fn ordered_events(h: &History) -> Vec<(u64, u8, u32)> {
    let mut ev: Vec<(u64, u8, u32)> = Vec::with_capacity(2 * h.txns.len());
    for (i, t) in h.txns.iter().enumerate() {
        ev.push((t.invoke_ns, INVOKE, i as u32));
        ev.push((t.complete_ns, COMPLETE, i as u32));
    }
    ev.sort_unstable();
    // Within a group of equal times, move a completion ahead of the
    // invocations when its session invokes another transaction in the same
    // group, so every session stays invoke/complete alternating.
    let mut g = 0;
    while g < ev.len() {
        let mut e = g + 1;
        while e < ev.len() && ev[e].0 == ev[g].0 {
            e += 1;
        }
        let group = &mut ev[g..e];
        let invokes = group.iter().take_while(|x| x.1 == INVOKE).count();
        if invokes > 0 && invokes < group.len() {
            let mut procs: Vec<(u64, u32)> = group[..invokes]
                .iter()
                .map(|x| (h.txns[x.2 as usize].process, x.2))
                .collect();
            procs.sort_unstable();
            let early = |x: &(u64, u8, u32)| {
                let p = h.txns[x.2 as usize].process;
                let from = procs.partition_point(|q| q.0 < p);
                procs[from..]
                    .iter()
                    .take_while(|q| q.0 == p)
                    .any(|q| q.1 != x.2)
            };
            let (front, rest): (Vec<_>, Vec<_>) = group[invokes..].iter().partition(|x| early(x));
            if !front.is_empty() {
                let mut order = front;
                order.extend_from_slice(&group[..invokes]);
                order.extend(rest);
                group.copy_from_slice(&order);
            }
        }
        g = e;
    }
    ev
}

fn write_value(out: &mut impl Write, t: &TxnRecord, invoke: bool) -> io::Result<()> {
    out.write_all(b"[")?;
    let mut first = true;
    for (k, v) in &t.reads {
        if !first {
            out.write_all(b" ")?;
        }
        first = false;
        out.write_all(b"[:r ")?;
        write_key(out, k)?;
        match v {
            Some(v) if !invoke => write!(out, " {v}]")?,
            _ => out.write_all(b" nil]")?,
        }
    }
    for (k, v) in &t.writes {
        if !first {
            out.write_all(b" ")?;
        }
        first = false;
        out.write_all(b"[:w ")?;
        write_key(out, k)?;
        write!(out, " {v}]")?;
    }
    out.write_all(b"]")
}

/// Writes a key as an EDN string: printable ASCII as is (with `"` and `\`
/// escaped), `\n`, `\t`, `\r` as their escapes, and every other byte `b` as
/// `\u00XX`, so distinct byte strings stay distinct strings.
fn write_key(out: &mut impl Write, k: &[u8]) -> io::Result<()> {
    out.write_all(b"\"")?;
    let mut plain = 0;
    for (i, &b) in k.iter().enumerate() {
        let esc: Option<&[u8]> = match b {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            b'\n' => Some(b"\\n"),
            b'\t' => Some(b"\\t"),
            b'\r' => Some(b"\\r"),
            0x20..=0x7e => None,
            _ => Some(b""),
        };
        if let Some(e) = esc {
            out.write_all(&k[plain..i])?;
            if e.is_empty() {
                write!(out, "\\u{:04x}", b)?;
            } else {
                out.write_all(e)?;
            }
            plain = i + 1;
        }
    }
    out.write_all(&k[plain..])?;
    out.write_all(b"\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &[u8]) -> String {
        let mut v = Vec::new();
        write_key(&mut v, k).unwrap();
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn keys_are_escaped() {
        assert_eq!(key(b"k1"), "\"k1\"");
        assert_eq!(key(b"a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(key(b"\x00\xff\n"), "\"\\u0000\\u00ff\\n\"");
        assert_eq!(key(b""), "\"\"");
    }

    fn rec(process: u64, invoke_ns: u64, complete_ns: u64) -> TxnRecord {
        TxnRecord {
            process,
            invoke_ns,
            complete_ns,
            reads: vec![],
            writes: vec![],
            deletes: Vec::new(),
            scans: Vec::new(),
            outcome: Outcome::Committed,
            read_ts: None,
            write_ts: None,
        }
    }

    #[test]
    fn equal_times_keep_sessions_alternating() {
        // Session 1: T0 [0,10], T1 [10,20]. Session 2: T2 [10,10].
        let h = History::from(vec![rec(1, 0, 10), rec(1, 10, 20), rec(2, 10, 10)]);
        let ev: Vec<(u8, u32)> = ordered_events(&h).iter().map(|e| (e.1, e.2)).collect();
        assert_eq!(
            ev,
            vec![
                (INVOKE, 0),
                (COMPLETE, 0),
                (INVOKE, 1),
                (INVOKE, 2),
                (COMPLETE, 2),
                (COMPLETE, 1)
            ]
        );
    }
}
