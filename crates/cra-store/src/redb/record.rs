//! How the embedded store keeps large JSON records on disk: as the text itself, or compressed
//! with LZ4 when the text is large enough for that to pay.
//!
//! Every byte a commit writes is copied into the page cache and flushed by the single committer
//! before any caller is answered, so the bytes of a record are paid for on the serial path of
//! every durable write (a resolve's TRACE record is about 25 kB of JSON, which compresses to
//! about a third). Compressing happens on the appender's thread, before the record is queued.
//!
//! A compressed record is the tag byte `LZ4` (never the first byte of a JSON text), the text's
//! length as a little-endian `u32`, then the LZ4 block of the text. Any other record is the JSON
//! text itself, which is also how every record written before compression existed reads back.
//!
//! Public so that tools reading a stopped server's file directly (forensics, the tamper tests)
//! can read and write records as the store does.

use std::borrow::Cow;

use crate::encryption::{Encryption, EncryptionError};

/// The first byte of a compressed record. A stored JSON text starts with `{`, `[`, `"`, a digit,
/// a letter or white space, never with a control character.
const LZ4: u8 = 0x01;

/// Bytes of tag and length before the compressed block.
const HEADER: usize = 5;

/// Texts shorter than this are stored as they are: the page they share with their neighbours
/// would barely shrink, and compressing them would cost more than the bytes it saves.
const COMPRESS_FROM: usize = 1024;

/// The largest ratio of text to block that LZ4 can reach (a run of one byte), with slack: a
/// stored length beyond it is not a record we wrote, and is refused before anything is
/// allocated for it.
const MAX_RATIO: usize = 256;

/// `text` as it is to be stored: compressed when it is at least `COMPRESS_FROM` bytes long and
/// the compressed form is smaller, else unchanged. A text that itself starts with the tag byte
/// (never JSON, but this is not checked) is always compressed, so that [`unpack`] gives back
/// exactly what was packed whatever the bytes (up to 4 GiB, far beyond any redb value: a longer
/// text is stored as it is).
pub fn pack(text: Vec<u8>) -> Vec<u8> {
    // A text starting with either tag byte (never JSON) is compressed, so that it starts with
    // `LZ4` once stored and neither [`unpack`] nor `encryption` mistakes it for what it is not.
    let tagged = matches!(text.first(), Some(&LZ4 | &0x02));
    if text.len() < COMPRESS_FROM && !tagged {
        return text;
    }
    let Ok(len) = u32::try_from(text.len()) else {
        return text;
    };
    let mut out = vec![0; HEADER + lz4_flex::block::get_maximum_output_size(text.len())];
    out[0] = LZ4;
    out[1..HEADER].copy_from_slice(&len.to_le_bytes());
    match lz4_flex::block::compress_into(&text, &mut out[HEADER..]) {
        Ok(n) if tagged || HEADER + n < text.len() => {
            out.truncate(HEADER + n);
            out
        }
        // Incompressible (or, impossibly, a buffer too small): the text is stored as it is.
        _ => text,
    }
}

/// `text` as stored in `table`: compressed when that pays ([`pack`]), then encrypted when a
/// storage key is configured.
pub(crate) fn store(
    enc: &Encryption,
    table: &str,
    text: Vec<u8>,
) -> Result<Vec<u8>, EncryptionError> {
    enc.encrypt(table, pack(text))
}

/// Why a stored record does not read: its key is missing or its bytes were changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LoadError {
    /// Compressed wrongly.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// Encrypted with a key not configured, or changed.
    #[error(transparent)]
    Encryption(#[from] EncryptionError),
}

/// The text a record of `table` holds, as [`store`] wrote it (or as written before
/// encryption or compression existed).
pub(crate) fn load<'a>(
    enc: &Encryption,
    table: &str,
    stored: &'a [u8],
) -> Result<Cow<'a, [u8]>, LoadError> {
    Ok(match enc.decrypt(table, stored)? {
        Cow::Borrowed(b) => unpack(b)?,
        Cow::Owned(v) => Cow::Owned(unpack(&v)?.into_owned()),
    })
}

/// Why a stored record that claims to be compressed is not one this store wrote.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}; the database file was changed or damaged outside the store")]
pub struct RecordError(String);

/// The JSON text of a stored record.
pub fn unpack(stored: &[u8]) -> Result<Cow<'_, [u8]>, RecordError> {
    if stored.first() != Some(&LZ4) {
        return Ok(Cow::Borrowed(stored));
    }
    let Some((len, block)) = stored
        .get(1..HEADER)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(|b| (u32::from_le_bytes(b) as usize, &stored[HEADER..]))
    else {
        return Err(RecordError(
            "a compressed record ends inside its header".to_owned(),
        ));
    };
    if len > block.len().saturating_mul(MAX_RATIO) {
        return Err(RecordError(format!(
            "a compressed record of {} bytes claims {len} bytes of text, more than LZ4 can hold",
            stored.len()
        )));
    }
    let mut text = vec![0; len];
    match lz4_flex::block::decompress_into(block, &mut text) {
        Ok(n) if n == len => Ok(Cow::Owned(text)),
        Ok(n) => Err(RecordError(format!(
            "a compressed record holds {n} bytes of text where its header says {len}"
        ))),
        Err(e) => Err(RecordError(format!(
            "a compressed record does not decompress: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_lines(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| {
                format!(
                    r#"{{"event_type":"policy.evaluated","sequence":{i},"payload":{{"result":"allow","text":"ü \n"}}}}"#
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
            .into_bytes()
    }

    #[test]
    fn large_texts_are_compressed_and_read_back_exactly() {
        let text = json_lines(200);
        let stored = pack(text.clone());
        assert_eq!(stored[0], LZ4);
        assert!(stored.len() * 3 < text.len(), "{} bytes", stored.len());
        assert_eq!(unpack(&stored).unwrap().as_ref(), text.as_slice());
    }

    #[test]
    fn short_and_incompressible_texts_are_stored_as_they_are() {
        let short = json_lines(2);
        assert!(short.len() < COMPRESS_FROM);
        assert_eq!(pack(short.clone()), short);
        // Hex digits from a hash chain: LZ4 finds nothing to share.
        let mut noise = String::from("\"");
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        while noise.len() < 4096 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            noise.push_str(&format!("{x:016x}"));
        }
        noise.push('"');
        let noise = noise.into_bytes();
        assert_eq!(pack(noise.clone()), noise);
        assert!(matches!(unpack(&noise), Ok(Cow::Borrowed(_))));
    }

    /// Random texts, of random lengths and alphabets (so some compress and some do not, some
    /// start with the tag byte): each reads back exactly.
    #[test]
    fn any_bytes_read_back_as_packed() {
        use rand::{Rng, SeedableRng};
        let seed: u64 = rand::random();
        println!("seed {seed}");
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        for _ in 0..500 {
            let len = match rng.random_range(0..4) {
                0 => rng.random_range(0..16),
                1 => rng.random_range(COMPRESS_FROM - 8..COMPRESS_FROM + 8),
                _ => rng.random_range(0..40_000),
            };
            let alphabet = rng.random_range(1..=256u32);
            let text: Vec<u8> = (0..len)
                .map(|_| rng.random_range(0..alphabet) as u8)
                .collect();
            let stored = pack(text.clone());
            if text.first() == Some(&LZ4) {
                assert_eq!(stored[0], LZ4, "seed {seed}");
            }
            assert_eq!(
                unpack(&stored).unwrap().as_ref(),
                text.as_slice(),
                "seed {seed}"
            );
        }
    }

    #[test]
    fn records_that_are_not_ours_are_refused_without_panicking() {
        let stored = pack(json_lines(200));
        let mut cases: Vec<Vec<u8>> = vec![
            vec![LZ4],
            vec![LZ4, 1, 0],
            stored[..stored.len() / 2].to_vec(),
        ];
        // A length far beyond what the block could hold.
        let mut huge = stored.clone();
        huge[1..HEADER].copy_from_slice(&u32::MAX.to_le_bytes());
        cases.push(huge);
        // A length one more than the text.
        let mut longer = stored.clone();
        let len = u32::from_le_bytes(stored[1..HEADER].try_into().unwrap()) + 1;
        longer[1..HEADER].copy_from_slice(&len.to_le_bytes());
        cases.push(longer);
        for case in cases {
            let err = unpack(&case).unwrap_err().to_string();
            assert!(err.contains("compressed record"), "{err}");
        }
    }
}
