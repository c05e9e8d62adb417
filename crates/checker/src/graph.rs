//! The dependency graph: compact edge storage (CSR), iterative Tarjan and a
//! shortest-cycle search. Nothing here recurses, so million-node components
//! cannot overflow the stack.

use crate::fxhash::{map_with_capacity, FxHashMap};

/// Kind of a dependency edge `a -> b` ("a must be serialised before b").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EdgeKind {
    /// Write-write: b installed the version of some key right after a's.
    Ww,
    /// Write-read: b read a version a wrote.
    Wr,
    /// Read-write anti-dependency: a read a version of some key and b wrote
    /// the next version of that key.
    Rw,
    /// Real time: a completed before b was invoked.
    Rt,
}

impl EdgeKind {
    /// Short name as used by Elle: `ww`, `wr`, `rw`, `rt`.
    pub fn as_str(self) -> &'static str {
        match self {
            EdgeKind::Ww => "ww",
            EdgeKind::Wr => "wr",
            EdgeKind::Rw => "rw",
            EdgeKind::Rt => "rt",
        }
    }

    fn code(self) -> u32 {
        match self {
            EdgeKind::Ww => 0,
            EdgeKind::Wr => 1,
            EdgeKind::Rw => 2,
            EdgeKind::Rt => 3,
        }
    }

    fn from_code(c: u32) -> Self {
        match c & 3 {
            0 => EdgeKind::Ww,
            1 => EdgeKind::Wr,
            2 => EdgeKind::Rw,
            _ => EdgeKind::Rt,
        }
    }
}

impl std::fmt::Display for EdgeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Edge targets carry their kind in the top two bits.
const KIND_SHIFT: u32 = 30;
/// Mask extracting the node id from a packed target.
pub(crate) const NODE_MASK: u32 = (1 << KIND_SHIFT) - 1;
/// Largest node count the packed representation supports.
pub(crate) const MAX_NODES: usize = NODE_MASK as usize;

/// Edges accumulated before the CSR is built, packed as
/// `src << 32 | kind << 30 | dst`.
#[derive(Default)]
pub(crate) struct EdgeList {
    packed: Vec<u64>,
}

impl EdgeList {
    pub(crate) fn with_capacity(cap: usize) -> Self {
        EdgeList {
            packed: Vec::with_capacity(cap),
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, src: u32, dst: u32, kind: EdgeKind) {
        debug_assert!(src <= NODE_MASK && dst <= NODE_MASK);
        let t = (kind.code() << KIND_SHIFT) | dst;
        self.packed.push((u64::from(src) << 32) | u64::from(t));
    }
}

/// Compressed sparse row adjacency.
pub(crate) struct Csr {
    off: Vec<usize>,
    tgt: Vec<u32>,
}

impl Csr {
    /// Builds the adjacency of `nodes` nodes by a counting sort on source.
    pub(crate) fn build(nodes: usize, edges: EdgeList) -> Self {
        let mut off = vec![0usize; nodes + 1];
        for &e in &edges.packed {
            off[(e >> 32) as usize + 1] += 1;
        }
        for i in 0..nodes {
            off[i + 1] += off[i];
        }
        let mut cursor: Vec<usize> = off[..nodes].to_vec();
        let mut tgt = vec![0u32; edges.packed.len()];
        for &e in &edges.packed {
            let s = (e >> 32) as usize;
            tgt[cursor[s]] = e as u32;
            cursor[s] += 1;
        }
        Csr { off, tgt }
    }

    pub(crate) fn nodes(&self) -> usize {
        self.off.len() - 1
    }

    pub(crate) fn edge_count(&self) -> usize {
        self.tgt.len()
    }

    /// Packed out-edges of `v`; decode with [`target`] and [`kind`].
    #[inline]
    pub(crate) fn out(&self, v: u32) -> &[u32] {
        let v = v as usize;
        &self.tgt[self.off[v]..self.off[v + 1]]
    }
}

/// Node id of a packed edge target.
#[inline]
pub(crate) fn target(packed: u32) -> u32 {
    packed & NODE_MASK
}

/// Kind of a packed edge target.
#[inline]
pub(crate) fn kind(packed: u32) -> EdgeKind {
    EdgeKind::from_code(packed >> KIND_SHIFT)
}

/// Iterative Tarjan over the subgraph induced by `allowed`, starting DFS
/// trees from `roots` (nodes not reachable from a root are never visited).
/// Calls `on_scc` once per strongly connected component with its members.
///
/// Working arrays are zero-initialised (index 0 means "unvisited"), so the
/// allocation is cheap even when only a small region is explored.
pub(crate) fn tarjan(
    g: &Csr,
    roots: impl IntoIterator<Item = u32>,
    allowed: impl Fn(u32) -> bool,
    mut on_scc: impl FnMut(&[u32]),
) {
    let n = g.nodes();
    let mut index = vec![0u32; n]; // 0 = unvisited; visit order starts at 1
    let mut low = vec![0u32; n];
    let mut on_stack = vec![false; n];
    let mut stack: Vec<u32> = Vec::new();
    // (node, next out-edge position)
    let mut call: Vec<(u32, usize)> = Vec::new();
    let mut counter: u32 = 0;

    for r in roots {
        if index[r as usize] != 0 || !allowed(r) {
            continue;
        }
        counter += 1;
        index[r as usize] = counter;
        low[r as usize] = counter;
        stack.push(r);
        on_stack[r as usize] = true;
        call.push((r, g.off[r as usize]));

        while let Some(frame) = call.last_mut() {
            let v = frame.0;
            let vi = v as usize;
            if frame.1 < g.off[vi + 1] {
                let w = target(g.tgt[frame.1]);
                frame.1 += 1;
                let wi = w as usize;
                if index[wi] == 0 {
                    if !allowed(w) {
                        continue;
                    }
                    counter += 1;
                    index[wi] = counter;
                    low[wi] = counter;
                    stack.push(w);
                    on_stack[wi] = true;
                    call.push((w, g.off[wi]));
                } else if on_stack[wi] && index[wi] < low[vi] {
                    low[vi] = index[wi];
                }
            } else {
                call.pop();
                if let Some(&(p, _)) = call.last() {
                    let pi = p as usize;
                    if low[vi] < low[pi] {
                        low[pi] = low[vi];
                    }
                }
                if low[vi] == index[vi] {
                    let mut start = stack.len();
                    while start > 0 {
                        start -= 1;
                        if stack[start] == v {
                            break;
                        }
                    }
                    for &m in &stack[start..] {
                        on_stack[m as usize] = false;
                    }
                    on_scc(&stack[start..]);
                    stack.truncate(start);
                }
            }
        }
    }
}

/// Breadth-first search for a shortest cycle through `start` in the subgraph
/// induced by `allowed`. Returns the cycle's nodes beginning with `start`;
/// the last node has an edge back to `start`.
pub(crate) fn shortest_cycle_through(
    g: &Csr,
    start: u32,
    allowed: impl Fn(u32) -> bool,
) -> Option<Vec<u32>> {
    let mut parent: FxHashMap<u32, u32> = map_with_capacity(64);
    let mut queue = std::collections::VecDeque::new();
    parent.insert(start, start);
    queue.push_back(start);
    while let Some(v) = queue.pop_front() {
        for &p in g.out(v) {
            let w = target(p);
            if w == start {
                let mut path = vec![v];
                let mut cur = v;
                while cur != start {
                    cur = *parent.get(&cur)?;
                    path.push(cur);
                }
                path.reverse();
                return Some(path);
            }
            if allowed(w) && !parent.contains_key(&w) {
                parent.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(n: usize, edges: &[(u32, u32)]) -> Csr {
        let mut el = EdgeList::default();
        for &(a, b) in edges {
            el.push(a, b, EdgeKind::Ww);
        }
        Csr::build(n, el)
    }

    fn sccs(g: &Csr) -> Vec<Vec<u32>> {
        let mut out = Vec::new();
        tarjan(
            g,
            0..g.nodes() as u32,
            |_| true,
            |c| {
                if c.len() > 1 {
                    let mut c = c.to_vec();
                    c.sort();
                    out.push(c);
                }
            },
        );
        out.sort();
        out
    }

    #[test]
    fn tarjan_finds_components() {
        let g = graph(7, &[(0, 1), (1, 2), (2, 0), (2, 3), (3, 4), (4, 3), (5, 6)]);
        assert_eq!(sccs(&g), vec![vec![0, 1, 2], vec![3, 4]]);
    }

    #[test]
    fn tarjan_handles_long_chain_without_recursion() {
        let n = 300_000u32;
        let mut e: Vec<(u32, u32)> = (0..n - 1).map(|i| (i, i + 1)).collect();
        e.push((n - 1, 0));
        let g = graph(n as usize, &e);
        let s = sccs(&g);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].len(), n as usize);
    }

    #[test]
    fn tarjan_respects_filter() {
        let g = graph(4, &[(0, 1), (1, 0), (1, 2), (2, 3), (3, 1)]);
        let mut found = Vec::new();
        tarjan(
            &g,
            0..4,
            |v| v != 0,
            |c| {
                if c.len() > 1 {
                    let mut c = c.to_vec();
                    c.sort();
                    found.push(c);
                }
            },
        );
        assert_eq!(found, vec![vec![1, 2, 3]]);
    }

    #[test]
    fn bfs_finds_shortest_cycle() {
        let g = graph(5, &[(0, 1), (1, 2), (2, 3), (3, 0), (1, 0), (2, 4)]);
        assert_eq!(shortest_cycle_through(&g, 0, |_| true), Some(vec![0, 1]));
        assert_eq!(
            shortest_cycle_through(&g, 2, |_| true),
            Some(vec![2, 3, 0, 1])
        );
        assert_eq!(shortest_cycle_through(&g, 4, |_| true), None);
    }

    #[test]
    fn packed_kinds_round_trip() {
        let mut el = EdgeList::default();
        el.push(0, NODE_MASK, EdgeKind::Rt);
        el.push(0, 5, EdgeKind::Rw);
        let g = Csr::build(1, el);
        let out = g.out(0);
        assert_eq!((target(out[0]), kind(out[0])), (NODE_MASK, EdgeKind::Rt));
        assert_eq!((target(out[1]), kind(out[1])), (5, EdgeKind::Rw));
    }
}
