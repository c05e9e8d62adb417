//! Random values of TPC-C's population and inputs: NURand and its
//! constants (clause 2.1.6), last names (4.3.2.3), a-strings, n-strings,
//! zip codes and addresses (4.3.2).

use rand::Rng;

use super::*;

/// NURand(A, x, y) of clause 2.1.6:
/// `(((random(0, A) | random(x, y)) + C) % (y − x + 1)) + x`, in `x..=y`.
/// Requires `x <= y` (otherwise returns `x`).
pub fn nurand(a: u32, c: u32, x: u32, y: u32, rng: &mut impl Rng) -> u32 {
    if y < x {
        return x;
    }
    let r = u64::from(rng.gen_range(0..=a) | rng.gen_range(x..=y));
    let span = u64::from(y - x) + 1;
    // The remainder is < span <= 2^32, and x + remainder <= y.
    x + ((r + u64::from(c)) % span) as u32
}

/// The syllables of clause 4.3.2.3, indexed by digit.
pub const SYLLABLES: [&str; 10] = [
    "BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING",
];

/// C_LAST for name number `num` in `0..=999` (4.3.2.3): the syllables of
/// its three decimal digits, e.g. 371 → `PRICALLYOUGHT`. Larger numbers use
/// their last three digits.
pub fn last_name(num: u32) -> Vec<u8> {
    let n = (num % 1000) as usize;
    let mut out = Vec::with_capacity(15);
    for digit in [n / 100, (n / 10) % 10, n % 10] {
        out.extend_from_slice(SYLLABLES[digit].as_bytes());
    }
    out
}

pub(super) const ALNUM: &[u8; 62] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// A random a-string (4.3.2.2) of length `lo..=hi`: alphanumeric ASCII.
pub(super) fn a_string(rng: &mut impl Rng, lo: usize, hi: usize) -> Vec<u8> {
    let n = rng.gen_range(lo..=hi);
    (0..n)
        .map(|_| ALNUM[rng.gen_range(0..ALNUM.len())])
        .collect()
}

pub(super) fn a_fixed<const N: usize>(rng: &mut impl Rng) -> [u8; N] {
    let mut out = [0u8; N];
    for b in out.iter_mut() {
        *b = ALNUM[rng.gen_range(0..ALNUM.len())];
    }
    out
}

/// A zip code (4.3.2.7): 4 random digits followed by "11111".
pub(super) fn zip(rng: &mut impl Rng) -> [u8; 9] {
    let mut z = *b"000011111";
    for b in z.iter_mut().take(4) {
        *b = b'0' + rng.gen_range(0..10u8);
    }
    z
}

/// I_DATA / S_DATA: an a-string of 26..=50 characters, 10% of them with
/// "ORIGINAL" at a random position (4.3.3.1).
pub(super) fn data_with_original(rng: &mut impl Rng) -> Vec<u8> {
    let mut s = a_string(rng, 26, 50);
    if rng.gen_range(0..10) == 0 {
        let at = rng.gen_range(0..=s.len() - 8);
        s[at..at + 8].copy_from_slice(b"ORIGINAL");
    }
    s
}

pub(super) fn address(rng: &mut impl Rng) -> Address {
    Address {
        street_1: a_string(rng, 10, 20),
        street_2: a_string(rng, 10, 20),
        city: a_string(rng, 10, 20),
        state: letters(rng),
        zip: zip(rng),
    }
}

/// Whether `hay` contains `needle`.
#[cfg(test)]
pub(super) fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use rand::rngs::SmallRng;
    use rand::SeedableRng;
    use std::collections::BTreeMap;

    use super::*;
    use crate::tpcc::test_support::*;

    #[test]
    fn tpcc_nurand_names_and_constants() {
        let mut rng = SmallRng::seed_from_u64(5);
        for (a, c, x, y) in [
            (A_C_LAST, C_LAST_RUN, 0, 999),
            (A_C_ID, C_C_ID, 1, 3000),
            (A_OL_I_ID, C_OL_I_ID, 1, 100_000),
            (A_C_ID, C_C_ID, 1, 120),
            (A_C_LAST, 0, 7, 7),
        ] {
            let mut hist = BTreeMap::new();
            for _ in 0..50_000 {
                let v = nurand(a, c, x, y, &mut rng);
                assert!((x..=y).contains(&v), "NURand({a},{x},{y}) gave {v}");
                *hist.entry(v).or_insert(0u32) += 1;
            }
            if y - x > 100 {
                // Non-uniform: the commonest value is well above the mean.
                let max = *hist.values().max().unwrap() as f64;
                let mean = 50_000.0 / f64::from(y - x + 1);
                assert!(max > 3.0 * mean, "NURand({a}) max {max} mean {mean}");
            }
        }
        assert_eq!(nurand(5, 0, 9, 3, &mut rng), 9);
        let delta = C_LAST_RUN.abs_diff(C_LAST_LOAD);
        assert!((65..=119).contains(&delta) && delta != 96 && delta != 112);
        assert!(C_LAST_LOAD <= A_C_LAST && C_LAST_RUN <= A_C_LAST);
        assert!(C_C_ID <= A_C_ID && C_OL_I_ID <= A_OL_I_ID);
        assert_eq!(last_name(371), b"PRICALLYOUGHT");
        assert_eq!(last_name(0), b"BARBARBAR");
        assert_eq!(last_name(999), b"EINGEINGEING");
        assert!(cfg(0).validate().is_err());
        assert!(cfg(1001).validate().is_err());
        assert!(cfg(1000).validate().is_ok());
        assert!(TpccConfig::default().validate().is_ok());
    }
}
