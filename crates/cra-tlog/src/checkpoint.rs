//! C2SP `tlog-checkpoint` (c2sp.org/tlog-checkpoint): the signed tree head, as the text of a
//! signed note.
//!
//! ```text
//! <origin>
//! <tree size, decimal, no leading zeroes>
//! <root hash, base64>
//! [<extension line>...]
//! ```
//!
//! The log signs with a key whose name is the origin ([`Checkpoint::sign`]); a reader opens a
//! note for the origin it expects ([`Checkpoint::open`]), which verifies the note first.
//!
//! # Invariants (tested by name)
//! * formatting a parsed checkpoint gives the same text (`checkpoints_round_trip`);
//! * sizes are canonical decimals and roots canonical base64 of 32 bytes, extension lines are
//!   non-empty (`malformed_checkpoints_say_which_line`);
//! * [`Checkpoint::open`] returns a checkpoint only from a note verified by the log's own key
//!   (named after the origin) whose body has the expected origin
//!   (`open_needs_the_origin_and_a_valid_signature`).

use crate::hash::{self, Hash};
use crate::note::{Ed25519Signer, Note, NoteError, Verifiers};

/// Why a checkpoint could not be read, made, signed or opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    /// Fewer than three lines, an empty line, or no final newline.
    #[error(
        "a checkpoint is at least three non-empty lines (origin, size, root hash), each ending in a newline; this text is not"
    )]
    Shape,
    /// The origin is empty.
    #[error("a checkpoint's origin is non-empty")]
    EmptyOrigin,
    /// The size line is not a canonical decimal u64.
    #[error("line 2 is the tree size in decimal without leading zeroes; {line:?} is not")]
    BadSize {
        /// The line.
        line: String,
    },
    /// The root line is not base64 of 32 bytes.
    #[error("line 3 is the root hash in base64: {0}")]
    BadRoot(hash::HashError),
    /// An extension line is empty or has a newline.
    #[error("extension lines are non-empty single lines")]
    BadExtension,
    /// The signer's key name is not the origin.
    #[error("checkpoints of origin {origin} are signed by a key named {origin}, not {key_name}")]
    SignerNotOrigin {
        /// The checkpoint's origin.
        origin: String,
        /// The signer's name.
        key_name: String,
    },
    /// The checkpoint is of another log.
    #[error("the checkpoint is of origin {found:?}, not the expected {expected:?}")]
    WrongOrigin {
        /// The origin expected.
        expected: String,
        /// The origin found.
        found: String,
    },
    /// The note verifies, but not by a key named after the origin (only by witnesses, say).
    #[error(
        "no valid signature on the checkpoint is by the log's key {origin}; witness cosignatures alone do not make a checkpoint"
    )]
    NotSignedByLog {
        /// The origin, which is the log key's name.
        origin: String,
    },
    /// The note around it is malformed or does not verify.
    #[error(transparent)]
    Note(#[from] NoteError),
}

/// A tree head: origin, size, root hash and optional extension lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    origin: String,
    size: u64,
    root: Hash,
    extensions: Vec<String>,
}

impl Checkpoint {
    /// A checkpoint without extension lines.
    ///
    /// # Errors
    /// [`CheckpointError::EmptyOrigin`] or [`CheckpointError::Shape`] (an origin with a newline).
    pub fn new(origin: &str, size: u64, root: Hash) -> Result<Self, CheckpointError> {
        Self::with_extensions(origin, size, root, Vec::new())
    }

    /// A checkpoint with extension lines (the spec does not recommend them).
    ///
    /// # Errors
    /// As [`Checkpoint::new`], and [`CheckpointError::BadExtension`].
    pub fn with_extensions(
        origin: &str,
        size: u64,
        root: Hash,
        extensions: Vec<String>,
    ) -> Result<Self, CheckpointError> {
        if origin.is_empty() {
            return Err(CheckpointError::EmptyOrigin);
        }
        if origin.contains('\n') {
            return Err(CheckpointError::Shape);
        }
        if extensions.iter().any(|e| e.is_empty() || e.contains('\n')) {
            return Err(CheckpointError::BadExtension);
        }
        Ok(Self {
            origin: origin.to_owned(),
            size,
            root,
            extensions,
        })
    }

    /// Reads a checkpoint body (a note's text).
    ///
    /// # Errors
    /// A [`CheckpointError`] naming the first line at fault.
    pub fn parse(text: &str) -> Result<Self, CheckpointError> {
        let body = text.strip_suffix('\n').ok_or(CheckpointError::Shape)?;
        let lines: Vec<&str> = body.split('\n').collect();
        let [origin, size, root, extensions @ ..] = lines.as_slice() else {
            return Err(CheckpointError::Shape);
        };
        if lines.iter().any(|l| l.is_empty()) {
            return Err(CheckpointError::Shape);
        }
        let size = parse_size(size)?;
        let root = hash::from_base64(root).map_err(CheckpointError::BadRoot)?;
        let extensions = extensions.iter().map(|e| (*e).to_owned()).collect();
        Self::with_extensions(origin, size, root, extensions)
    }

    /// The checkpoint's text (a note's body).
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.size,
            hash::to_base64(&self.root)
        );
        for extension in &self.extensions {
            out.push_str(extension);
            out.push('\n');
        }
        out
    }

    /// The origin (the log's identity).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The tree size.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The root hash.
    pub fn root(&self) -> &Hash {
        &self.root
    }

    /// The extension lines, without newlines.
    pub fn extensions(&self) -> &[String] {
        &self.extensions
    }

    /// A note of this checkpoint signed by `signer`, whose key name must be the origin.
    ///
    /// # Errors
    /// [`CheckpointError::SignerNotOrigin`], or a [`NoteError`] from the note.
    pub fn sign(&self, signer: &Ed25519Signer) -> Result<Note, CheckpointError> {
        if signer.name() != self.origin {
            return Err(CheckpointError::SignerNotOrigin {
                origin: self.origin.clone(),
                key_name: signer.name().to_owned(),
            });
        }
        let mut note = Note::new(&self.to_text())?;
        note.sign(signer)?;
        Ok(note)
    }

    /// Reads a signed checkpoint note, verifies it against `known` (see [`Note::verify`]) and
    /// returns the checkpoint if it is of `origin` and a verified signature is by a key named
    /// `origin` (the log's), with the note (for cosignatures).
    ///
    /// # Errors
    /// [`CheckpointError::Note`] when the note is malformed or unverified,
    /// [`CheckpointError::NotSignedByLog`], then the checkpoint's own errors, then
    /// [`CheckpointError::WrongOrigin`].
    pub fn open(
        signed: &[u8],
        origin: &str,
        known: &Verifiers,
    ) -> Result<(Self, Note), CheckpointError> {
        let note = Note::parse(signed)?;
        if !note.verify(known)?.iter().any(|s| s.name() == origin) {
            return Err(CheckpointError::NotSignedByLog {
                origin: origin.to_owned(),
            });
        }
        let checkpoint = Self::parse(note.text())?;
        if checkpoint.origin != origin {
            return Err(CheckpointError::WrongOrigin {
                expected: origin.to_owned(),
                found: checkpoint.origin,
            });
        }
        Ok((checkpoint, note))
    }
}

/// A canonical decimal u64: digits only, no leading zero unless it is `0`.
fn parse_size(line: &str) -> Result<u64, CheckpointError> {
    let bad = || CheckpointError::BadSize {
        line: line.to_owned(),
    };
    let digits_only = !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit());
    if !digits_only || (line.len() > 1 && line.starts_with('0')) {
        return Err(bad());
    }
    line.parse().map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::leaf_hash;

    /// The example body of c2sp.org/tlog-checkpoint.
    const SPEC_BODY: &str =
        "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n";

    #[test]
    fn checkpoints_round_trip() {
        let parsed = Checkpoint::parse(SPEC_BODY);
        assert_eq!(parsed.as_ref().map(Checkpoint::size), Ok(20_852_163));
        assert_eq!(parsed.map(|c| c.to_text()), Ok(SPEC_BODY.to_owned()));
        let with = format!("{SPEC_BODY}ext one\next two\n");
        let parsed = Checkpoint::parse(&with);
        assert_eq!(parsed.as_ref().map(|c| c.extensions().len()), Ok(2));
        assert_eq!(parsed.map(|c| c.to_text()), Ok(with));
    }

    #[test]
    fn malformed_checkpoints_say_which_line() {
        let root = hash::to_base64(&leaf_hash(b""));
        let cases = [
            (format!("o\n1\n{root}"), CheckpointError::Shape),
            ("o\n1\n".to_owned(), CheckpointError::Shape),
            (format!("o\n1\n{root}\n\n"), CheckpointError::Shape),
            (format!("\n1\n{root}\n"), CheckpointError::Shape),
            (
                format!("o\n01\n{root}\n"),
                CheckpointError::BadSize { line: "01".into() },
            ),
            (
                format!("o\n+1\n{root}\n"),
                CheckpointError::BadSize { line: "+1".into() },
            ),
            (
                format!("o\n18446744073709551616\n{root}\n"),
                CheckpointError::BadSize {
                    line: "18446744073709551616".into(),
                },
            ),
            (
                "o\n1\nAAAA\n".to_owned(),
                CheckpointError::BadRoot(hash::HashError::WrongLength { len: 3 }),
            ),
        ];
        for (text, want) in cases {
            assert_eq!(Checkpoint::parse(&text), Err(want), "{text:?}");
        }
        assert!(Checkpoint::parse(&format!("o\n0\n{root}\n")).is_ok());
        assert!(Checkpoint::parse(&format!("o\n18446744073709551615\n{root}\n")).is_ok());
    }

    #[test]
    fn open_needs_the_origin_and_a_valid_signature() {
        let Ok(signer) = Ed25519Signer::from_seed("log.example/a", &[5; 32]) else {
            unreachable!()
        };
        let Ok(checkpoint) = Checkpoint::new("log.example/a", 3, leaf_hash(b"r")) else {
            unreachable!()
        };
        let Ok(note) = checkpoint.sign(&signer) else {
            unreachable!()
        };
        let known = Verifiers::new(vec![signer.verifier()]).unwrap_or_default();
        let text = note.to_text();
        let opened = Checkpoint::open(text.as_bytes(), "log.example/a", &known);
        assert_eq!(opened.map(|(c, _)| c), Ok(checkpoint.clone()));
        assert!(matches!(
            Checkpoint::open(text.as_bytes(), "log.example/b", &known),
            Err(CheckpointError::NotSignedByLog { .. })
        ));
        // signed by a key named "log.example/b" but the body says "log.example/a"
        let Ok(b) = Ed25519Signer::from_seed("log.example/b", &[6; 32]) else {
            unreachable!()
        };
        let Ok(mut misnamed) = Note::new(&checkpoint.to_text()) else {
            unreachable!()
        };
        assert_eq!(misnamed.sign(&b), Ok(()));
        let known_b = Verifiers::new(vec![b.verifier()]).unwrap_or_default();
        assert!(matches!(
            Checkpoint::open(misnamed.to_text().as_bytes(), "log.example/b", &known_b),
            Err(CheckpointError::WrongOrigin { .. })
        ));
        // a witness's valid cosignature alone does not open a checkpoint
        let Ok(w) = Ed25519Signer::from_seed("witness.example", &[8; 32]) else {
            unreachable!()
        };
        let Ok(mut witnessed) = Note::new(&checkpoint.to_text()) else {
            unreachable!()
        };
        assert_eq!(witnessed.sign(&w), Ok(()));
        let known_w = Verifiers::new(vec![w.verifier(), signer.verifier()]).unwrap_or_default();
        assert!(matches!(
            Checkpoint::open(witnessed.to_text().as_bytes(), "log.example/a", &known_w),
            Err(CheckpointError::NotSignedByLog { .. })
        ));
        assert!(matches!(
            Checkpoint::open(text.as_bytes(), "log.example/a", &Verifiers::default()),
            Err(CheckpointError::Note(NoteError::NoKnownSignature))
        ));
        let Ok(other) = Ed25519Signer::from_seed("log.example/b", &[5; 32]) else {
            unreachable!()
        };
        assert!(matches!(
            checkpoint.sign(&other),
            Err(CheckpointError::SignerNotOrigin { .. })
        ));
    }
}
