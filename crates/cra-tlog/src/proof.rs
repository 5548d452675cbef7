//! Inclusion and consistency proofs (RFC 9162 §2.1.3 and §2.1.4): generation from a
//! [`HashReader`], and verification.
//!
//! # The seam: [`HashReader`]
//! Generation never rebuilds the tree. Every hash a proof holds is the Merkle Tree Hash of a
//! range `[start, end)` of leaves whose start is a multiple of a power of two at least as wide
//! as the range; such a range is a run of at most 64 *complete* subtrees of decreasing size,
//! and a complete subtree never changes once its last leaf is appended. So a store answers a
//! proof from the complete-subtree hashes it keeps (stored nodes, or tiles: see
//! [`crate::tiles::TileHashReader`]); it may also answer whole ranges itself
//! ([`HashReader::range_hash`]). [`MemoryTree`] is the in-memory reader the tests use.
//!
//! # Invariants (tested by name)
//! * a proof generated for any `index < size` (or `old <= new`) verifies against the roots the
//!   same reader gives (`every_proof_of_small_trees_verifies`);
//! * verification never panics: sizes 0, `index >= size`, `old > new` and `u64::MAX` are typed
//!   errors (`verification_refuses_impossible_coordinates`);
//! * a proof of the wrong length is refused before any hashing, with the length expected
//!   (`a_proof_of_the_wrong_length_says_what_length_was_expected`).

use crate::hash::{self, Hash, HashError, empty_root, node_hash, split_point};

/// Why a [`HashReader`] could not answer.
#[derive(Debug, thiserror::Error)]
pub enum HashReadError {
    /// The store has no hash for this complete subtree (it is not complete in the tree the
    /// store holds, or the store lost it).
    #[error(
        "no stored hash for the complete subtree at level {level}, index {index}: the tree the store holds is too small, or the store is incomplete"
    )]
    Missing {
        /// The subtree's level (0 = a leaf hash).
        level: u8,
        /// The subtree's index within its level.
        index: u64,
    },
    /// Stored data had the wrong shape (a tile of the wrong length, for example).
    #[error("stored tree data is malformed: {0}; the store needs repair")]
    Malformed(String),
    /// The store itself failed.
    #[error("the hash store failed: {0}")]
    Store(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Answers hashes of a tree that is only ever appended to.
///
/// A complete subtree at `level` and `index` covers the leaves
/// `[index * 2^level, (index + 1) * 2^level)`; its hash is fixed once its last leaf exists.
pub trait HashReader {
    /// The number of leaves the reader knows about; proofs can be made for any size up to it.
    fn size(&self) -> u64;

    /// The hash of the complete subtree at `level` (0..=63) and `index`.
    ///
    /// # Errors
    /// [`HashReadError::Missing`] when that subtree is not complete within [`HashReader::size`],
    /// or what the store met.
    fn subtree_hash(&self, level: u8, index: u64) -> Result<Hash, HashReadError>;

    /// The Merkle Tree Hash of leaves `[start, end)` taken as a tree of their own.
    ///
    /// The default composes it from complete subtrees: an aligned power-of-two range is one
    /// subtree; any other splits as RFC 9162 §2.1.1 does. A store may answer faster.
    ///
    /// # Errors
    /// As [`HashReader::subtree_hash`]; an empty or reversed range is
    /// [`HashReadError::Malformed`].
    fn range_hash(&self, start: u64, end: u64) -> Result<Hash, HashReadError> {
        default_range_hash(self, start, end)
    }
}

/// [`HashReader::range_hash`]'s default, for implementors that override it for some ranges.
///
/// # Errors
/// As [`HashReader::range_hash`].
pub fn default_range_hash<R: HashReader + ?Sized>(
    reader: &R,
    start: u64,
    end: u64,
) -> Result<Hash, HashReadError> {
    if end <= start {
        return Err(HashReadError::Malformed(format!(
            "empty range [{start}, {end})"
        )));
    }
    let width = end - start;
    if width.is_power_of_two() && start.is_multiple_of(width) {
        let level = width.trailing_zeros() as u8;
        return reader.subtree_hash(level, start >> level);
    }
    let mid = start + split_point(width);
    let left = default_range_hash(reader, start, mid)?;
    let right = default_range_hash(reader, mid, end)?;
    Ok(node_hash(&left, &right))
}

/// Why a proof could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ProofError {
    /// The tree asked about is larger than the tree the reader holds.
    #[error("a proof for tree size {size} was asked of a store holding {held} leaves")]
    SizeBeyondTree {
        /// The size asked for.
        size: u64,
        /// What the reader holds.
        held: u64,
    },
    /// The leaf index is not in the tree.
    #[error("leaf index {index} is not in a tree of size {size}; indices run from 0 to size - 1")]
    IndexOutOfRange {
        /// The index asked for.
        index: u64,
        /// The tree size.
        size: u64,
    },
    /// A consistency proof was asked from a larger tree to a smaller one.
    #[error(
        "a consistency proof runs from an older (smaller) tree to a newer one, not {old} to {new}"
    )]
    SizesOutOfOrder {
        /// The first size.
        old: u64,
        /// The second size.
        new: u64,
    },
    /// The reader could not answer.
    #[error(transparent)]
    Read(#[from] HashReadError),
}

/// The root of the first `size` leaves the reader holds (RFC 9162 §2.1.1; size 0 is the
/// empty root).
///
/// # Errors
/// [`ProofError::SizeBeyondTree`], or what the reader met.
pub fn root<R: HashReader + ?Sized>(reader: &R, size: u64) -> Result<Hash, ProofError> {
    check_held(reader, size)?;
    if size == 0 {
        return Ok(empty_root());
    }
    Ok(reader.range_hash(0, size)?)
}

/// The inclusion proof of leaf `index` in the tree of the first `size` leaves (RFC 9162
/// §2.1.3.1), from the leaf's sibling up to a child of the root.
///
/// # Errors
/// [`ProofError::IndexOutOfRange`], [`ProofError::SizeBeyondTree`], or what the reader met.
pub fn inclusion_proof<R: HashReader + ?Sized>(
    reader: &R,
    index: u64,
    size: u64,
) -> Result<Vec<Hash>, ProofError> {
    if index >= size {
        return Err(ProofError::IndexOutOfRange { index, size });
    }
    check_held(reader, size)?;
    let (mut lo, mut hi, mut m) = (0u64, size, index);
    let mut siblings = Vec::new();
    while hi - lo > 1 {
        let k = split_point(hi - lo);
        if m < k {
            siblings.push(reader.range_hash(lo + k, hi)?);
            hi = lo + k;
        } else {
            siblings.push(reader.range_hash(lo, lo + k)?);
            lo += k;
            m -= k;
        }
    }
    siblings.reverse();
    Ok(siblings)
}

/// The consistency proof from the tree of the first `old` leaves to that of the first `new`
/// (RFC 9162 §2.1.4.1). Empty when `old` is 0 or equals `new`.
///
/// # Errors
/// [`ProofError::SizesOutOfOrder`], [`ProofError::SizeBeyondTree`], or what the reader met.
pub fn consistency_proof<R: HashReader + ?Sized>(
    reader: &R,
    old: u64,
    new: u64,
) -> Result<Vec<Hash>, ProofError> {
    if old > new {
        return Err(ProofError::SizesOutOfOrder { old, new });
    }
    check_held(reader, new)?;
    if old == 0 || old == new {
        return Ok(Vec::new());
    }
    // SUBPROOF(m, D[lo:hi], b), unrolled: descend while m differs from the subtree's size.
    let (mut lo, mut hi, mut m, mut whole_old_tree) = (0u64, new, old, true);
    let mut siblings = Vec::new();
    while m != hi - lo {
        let k = split_point(hi - lo);
        if m <= k {
            siblings.push(reader.range_hash(lo + k, hi)?);
            hi = lo + k;
        } else {
            siblings.push(reader.range_hash(lo, lo + k)?);
            lo += k;
            m -= k;
            whole_old_tree = false;
        }
    }
    let mut proof = Vec::with_capacity(siblings.len() + 1);
    if !whole_old_tree {
        proof.push(reader.range_hash(lo, hi)?);
    }
    proof.extend(siblings.into_iter().rev());
    Ok(proof)
}

fn check_held<R: HashReader + ?Sized>(reader: &R, size: u64) -> Result<(), ProofError> {
    let held = reader.size();
    if size > held {
        return Err(ProofError::SizeBeyondTree { size, held });
    }
    Ok(())
}

/// Why a proof did not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// The leaf index is not in the tree the proof claims.
    #[error("leaf index {index} is not in a tree of size {size}; the proof cannot be about it")]
    IndexOutOfRange {
        /// The claimed index.
        index: u64,
        /// The claimed size.
        size: u64,
    },
    /// A consistency proof claims the new tree is smaller than the old one.
    #[error("a tree of size {old} cannot grow into a tree of size {new}")]
    SizesOutOfOrder {
        /// The old size.
        old: u64,
        /// The new size.
        new: u64,
    },
    /// The proof has the wrong number of hashes for its coordinates.
    #[error(
        "the proof has {got} hashes and a proof for these sizes has {expected}: it is for other coordinates, or truncated or padded"
    )]
    WrongProofLength {
        /// How many the coordinates call for.
        expected: usize,
        /// How many the proof has.
        got: usize,
    },
    /// The proof recomputes a different root than the one claimed.
    #[error(
        "the proof leads to root {computed} and the tree's root is {expected}: the leaf is not in that tree at that index, or the proof was altered"
    )]
    RootMismatch {
        /// The claimed root (hex).
        expected: String,
        /// The root the proof leads to (hex).
        computed: String,
    },
    /// A consistency proof recomputes a different old root than the one claimed.
    #[error(
        "the proof leads to old root {computed} and the old tree's root is {expected}: the trees are not consistent, or the proof was altered"
    )]
    OldRootMismatch {
        /// The claimed old root (hex).
        expected: String,
        /// The old root the proof leads to (hex).
        computed: String,
    },
    /// A proof line or JSON item is not a hash.
    #[error("proof hash {position} is unreadable: {error}")]
    BadHash {
        /// Its 0-based position in the proof.
        position: usize,
        /// What is wrong with it.
        error: HashError,
    },
}

/// The number of hashes in the inclusion proof of `index` in a tree of `size > index`: the
/// levels below the point where the leaf's path leaves the left edge (`inner`) plus the
/// left-hand complete subtrees above it (`border`).
fn inclusion_shape(index: u64, size: u64) -> (u32, u32) {
    let inner = 64 - (index ^ (size - 1)).leading_zeros();
    let border = index.checked_shr(inner).unwrap_or(0).count_ones();
    (inner, border)
}

/// Verifies that `leaf` (a leaf hash) is at `index` in the tree of `size` with `root`
/// (RFC 9162 §2.1.3.2).
///
/// # Errors
/// The first thing found wrong, as a [`VerifyError`].
pub fn verify_inclusion(
    leaf: &Hash,
    index: u64,
    size: u64,
    proof: &[Hash],
    root: &Hash,
) -> Result<(), VerifyError> {
    let computed = root_from_inclusion(leaf, index, size, proof)?;
    if computed != *root {
        return Err(VerifyError::RootMismatch {
            expected: hash::to_hex(root),
            computed: hash::to_hex(&computed),
        });
    }
    Ok(())
}

/// The root an inclusion proof leads to (RFC 9162 §2.1.3.2 steps 1 to 4).
///
/// # Errors
/// [`VerifyError::IndexOutOfRange`] or [`VerifyError::WrongProofLength`].
pub fn root_from_inclusion(
    leaf: &Hash,
    index: u64,
    size: u64,
    proof: &[Hash],
) -> Result<Hash, VerifyError> {
    if index >= size {
        return Err(VerifyError::IndexOutOfRange { index, size });
    }
    let (inner, border) = inclusion_shape(index, size);
    let expected = (inner + border) as usize;
    if proof.len() != expected {
        return Err(VerifyError::WrongProofLength {
            expected,
            got: proof.len(),
        });
    }
    let (mut fn_, mut sn, mut r) = (index, size - 1, *leaf);
    for p in proof {
        if fn_ & 1 == 1 || fn_ == sn {
            r = node_hash(p, &r);
            while fn_ & 1 == 0 && fn_ != 0 {
                fn_ >>= 1;
                sn >>= 1;
            }
        } else {
            r = node_hash(&r, p);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    // The length check above makes sn reach 0 exactly here; kept as the RFC's last check.
    if sn != 0 {
        return Err(VerifyError::WrongProofLength {
            expected,
            got: proof.len(),
        });
    }
    Ok(r)
}

/// The number of hashes in the consistency proof from `old` to `new` (`0 < old < new`).
fn consistency_len(old: u64, new: u64) -> usize {
    let (inner, border) = inclusion_shape(old - 1, new);
    let shift = old.trailing_zeros();
    let seed = usize::from(!old.is_power_of_two());
    (inner.saturating_sub(shift) + border) as usize + seed
}

/// Verifies that the tree of size `old` with `old_root` is a prefix of the tree of size `new`
/// with `new_root` (RFC 9162 §2.1.4.2). Equal sizes need equal roots and an empty proof; every
/// tree extends the empty tree (whose root must be [`empty_root`]) with an empty proof.
///
/// # Errors
/// The first thing found wrong, as a [`VerifyError`].
pub fn verify_consistency(
    old: u64,
    new: u64,
    old_root: &Hash,
    new_root: &Hash,
    proof: &[Hash],
) -> Result<(), VerifyError> {
    if old > new {
        return Err(VerifyError::SizesOutOfOrder { old, new });
    }
    if old == 0 || old == new {
        if !proof.is_empty() {
            return Err(VerifyError::WrongProofLength {
                expected: 0,
                got: proof.len(),
            });
        }
        let expected_old = if old == 0 { empty_root() } else { *new_root };
        return same_root(old_root, &expected_old, true);
    }
    let expected = consistency_len(old, new);
    if proof.len() != expected {
        return Err(VerifyError::WrongProofLength {
            expected,
            got: proof.len(),
        });
    }
    let (fr, sr, sn) = consistency_roots(old, new, old_root, proof);
    if sn != 0 {
        return Err(VerifyError::WrongProofLength {
            expected,
            got: proof.len(),
        });
    }
    same_root(old_root, &fr, true)?;
    same_root(new_root, &sr, false)
}

/// RFC 9162 §2.1.4.2 steps 2 to 6: the old and new roots a consistency proof leads to. The
/// caller has checked `0 < old < new` and the proof's length. The third value is what is left
/// of `sn`, 0 when the proof had exactly the right length (step 7).
fn consistency_roots(old: u64, new: u64, old_root: &Hash, proof: &[Hash]) -> (Hash, Hash, u64) {
    let mut path: Vec<&Hash> = Vec::with_capacity(proof.len() + 1);
    if old.is_power_of_two() {
        path.push(old_root);
    }
    path.extend(proof.iter());
    let (mut fn_, mut sn) = (old - 1, new - 1);
    while fn_ & 1 == 1 {
        fn_ >>= 1;
        sn >>= 1;
    }
    let Some((first, rest)) = path.split_first() else {
        return (empty_root(), empty_root(), sn);
    };
    let (mut fr, mut sr) = (**first, **first);
    for c in rest {
        if fn_ & 1 == 1 || fn_ == sn {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            while fn_ & 1 == 0 && fn_ != 0 {
                fn_ >>= 1;
                sn >>= 1;
            }
        } else {
            sr = node_hash(&sr, c);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    (fr, sr, sn)
}

fn same_root(claimed: &Hash, computed: &Hash, old: bool) -> Result<(), VerifyError> {
    if claimed == computed {
        return Ok(());
    }
    let (expected, computed) = (hash::to_hex(claimed), hash::to_hex(computed));
    Err(if old {
        VerifyError::OldRootMismatch { expected, computed }
    } else {
        VerifyError::RootMismatch { expected, computed }
    })
}

/// A proof as lowercase hex strings (the JSON form of later routes).
pub fn proof_to_hex(proof: &[Hash]) -> Vec<String> {
    proof.iter().map(hash::to_hex).collect()
}

/// Reads a proof from lowercase hex strings.
///
/// # Errors
/// [`VerifyError::BadHash`] naming the first unreadable item.
pub fn proof_from_hex<S: AsRef<str>>(items: &[S]) -> Result<Vec<Hash>, VerifyError> {
    items
        .iter()
        .enumerate()
        .map(|(position, item)| {
            hash::from_hex(item.as_ref()).map_err(|error| VerifyError::BadHash { position, error })
        })
        .collect()
}

/// An append-only tree held in memory: every complete subtree's hash, level by level.
///
/// `levels[l][i]` is the hash of the complete subtree at level `l`, index `i`; appending a leaf
/// adds the subtrees it completes. For tests and small tools; stores keep the same hashes.
#[derive(Debug, Clone, Default)]
pub struct MemoryTree {
    levels: Vec<Vec<Hash>>,
}

impl MemoryTree {
    /// An empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// A tree of these leaf hashes, in order.
    pub fn from_leaf_hashes(leaves: &[Hash]) -> Self {
        let mut tree = Self::new();
        for leaf in leaves {
            tree.append(*leaf);
        }
        tree
    }

    /// Appends a leaf hash (for an event: [`crate::hash::leaf_hash`] of its `event_hash`
    /// bytes) and returns its index.
    pub fn append(&mut self, leaf: Hash) -> u64 {
        let index = self.size();
        let mut carry = leaf;
        let mut level = 0;
        loop {
            if self.levels.len() == level {
                self.levels.push(Vec::new());
            }
            let row = &mut self.levels[level];
            row.push(carry);
            if !row.len().is_multiple_of(2) {
                break;
            }
            carry = node_hash(&row[row.len() - 2], &row[row.len() - 1]);
            level += 1;
        }
        index
    }

    /// The current root.
    pub fn root(&self) -> Hash {
        root(self, self.size()).unwrap_or_else(|_| empty_root())
    }
}

impl HashReader for MemoryTree {
    fn size(&self) -> u64 {
        self.levels.first().map_or(0, |leaves| leaves.len() as u64)
    }

    fn subtree_hash(&self, level: u8, index: u64) -> Result<Hash, HashReadError> {
        let found = self
            .levels
            .get(usize::from(level))
            .and_then(|row| usize::try_from(index).ok().and_then(|i| row.get(i)));
        found
            .copied()
            .ok_or(HashReadError::Missing { level, index })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::{leaf_hash, root_of};

    fn leaves(n: u64) -> Vec<Hash> {
        (0..n).map(|i| leaf_hash(&i.to_be_bytes())).collect()
    }

    #[test]
    fn every_proof_of_small_trees_verifies() {
        let all = leaves(40);
        let tree = MemoryTree::from_leaf_hashes(&all);
        for size in 0..=40u64 {
            let root_n = root(&tree, size).unwrap_or_default();
            assert_eq!(root_n, root_of(&all[..size as usize]), "size {size}");
            for index in 0..size {
                let p = inclusion_proof(&tree, index, size).unwrap_or_default();
                let leaf = all[index as usize];
                assert_eq!(verify_inclusion(&leaf, index, size, &p, &root_n), Ok(()));
            }
            for old in 0..=size {
                let p = consistency_proof(&tree, old, size).unwrap_or_default();
                let old_root = root(&tree, old).unwrap_or_default();
                assert_eq!(
                    verify_consistency(old, size, &old_root, &root_n, &p),
                    Ok(())
                );
            }
        }
    }

    #[test]
    fn verification_refuses_impossible_coordinates() {
        let h = leaf_hash(b"a");
        assert!(matches!(
            verify_inclusion(&h, 0, 0, &[], &h),
            Err(VerifyError::IndexOutOfRange { .. })
        ));
        assert!(matches!(
            verify_inclusion(&h, u64::MAX, u64::MAX, &[], &h),
            Err(VerifyError::IndexOutOfRange { .. })
        ));
        assert!(matches!(
            verify_inclusion(&h, u64::MAX - 1, u64::MAX, &[h; 3], &h),
            Err(VerifyError::WrongProofLength { got: 3, .. })
        ));
        assert!(matches!(
            verify_consistency(5, 4, &h, &h, &[]),
            Err(VerifyError::SizesOutOfOrder { old: 5, new: 4 })
        ));
        assert!(verify_consistency(u64::MAX - 1, u64::MAX, &h, &h, &[h; 128]).is_err());
        assert!(verify_consistency(0, 3, &h, &h, &[]).is_err());
        let tree = MemoryTree::from_leaf_hashes(&leaves(3));
        assert!(matches!(
            inclusion_proof(&tree, 3, 3),
            Err(ProofError::IndexOutOfRange { .. })
        ));
        assert!(matches!(
            inclusion_proof(&tree, 0, 4),
            Err(ProofError::SizeBeyondTree { .. })
        ));
        assert!(matches!(
            consistency_proof(&tree, 3, 2),
            Err(ProofError::SizesOutOfOrder { .. })
        ));
        assert!(matches!(
            root(&tree, u64::MAX),
            Err(ProofError::SizeBeyondTree { .. })
        ));
    }

    #[test]
    fn a_proof_of_the_wrong_length_says_what_length_was_expected() {
        let all = leaves(8);
        let tree = MemoryTree::from_leaf_hashes(&all);
        let mut p = inclusion_proof(&tree, 2, 8).unwrap_or_default();
        p.push(all[0]);
        assert_eq!(
            verify_inclusion(&all[2], 2, 8, &p, &tree.root()),
            Err(VerifyError::WrongProofLength {
                expected: 3,
                got: 4
            })
        );
        let old_root = root(&tree, 3).unwrap_or_default();
        assert_eq!(
            verify_consistency(3, 8, &old_root, &tree.root(), &[]),
            Err(VerifyError::WrongProofLength {
                expected: 4,
                got: 0
            })
        );
    }

    #[test]
    fn hex_proofs_name_the_bad_item() {
        let p = vec![leaf_hash(b"a"), leaf_hash(b"b")];
        assert_eq!(proof_from_hex(&proof_to_hex(&p)), Ok(p));
        assert!(matches!(
            proof_from_hex(&["00".repeat(32), "zz".to_owned()]),
            Err(VerifyError::BadHash { position: 1, .. })
        ));
    }
}
