//! A certificate's subject as an RFC 4514 string, the form the keys file's `[[certificates]]`
//! entries name (`specs/http.md`, "Mutual TLS").
//!
//! The rendering follows RFC 4514 §2: relative distinguished names last to first, separated by
//! `,`; the attributes of a multi-valued one joined by `+`, also last first (RFC 4514 allows any
//! order there; this is the one OpenSSL prints); the nine short names of §3 (`CN`, `L`, `ST`, `O`, `OU`, `C`, `STREET`, `DC`, `UID`),
//! every other type as its dotted OID with the value's DER in hex after `#`; string values as
//! UTF-8 with `"+,;<>\` escaped, a leading space or `#` and a trailing space escaped, and NUL as
//! `\00`. For subjects of printable ASCII this is what `openssl x509 -noout -subject -nameopt
//! RFC2253` prints, and the tests compare the two.
//!
//! Only the subject is read, with a DER reader of its own: the certificate has already been
//! verified by rustls when this runs, and anything this reader does not understand yields `None`
//! (the connection is then served with no certificate identity), never a panic.

/// DER tags this module reads.
mod tag {
    pub(super) const SEQUENCE: u8 = 0x30;
    pub(super) const SET: u8 = 0x31;
    pub(super) const OID: u8 = 0x06;
    pub(super) const INTEGER: u8 = 0x02;
    pub(super) const VERSION: u8 = 0xA0;
    pub(super) const UTF8: u8 = 0x0C;
    pub(super) const NUMERIC: u8 = 0x12;
    pub(super) const PRINTABLE: u8 = 0x13;
    pub(super) const TELETEX: u8 = 0x14;
    pub(super) const IA5: u8 = 0x16;
    pub(super) const VISIBLE: u8 = 0x1A;
    pub(super) const UNIVERSAL: u8 = 0x1C;
    pub(super) const BMP: u8 = 0x1E;
}

/// The RFC 4514 §3 short names, by dotted OID.
const SHORT_NAMES: [(&str, &str); 9] = [
    ("2.5.4.3", "CN"),
    ("2.5.4.7", "L"),
    ("2.5.4.8", "ST"),
    ("2.5.4.10", "O"),
    ("2.5.4.11", "OU"),
    ("2.5.4.6", "C"),
    ("2.5.4.9", "STREET"),
    ("0.9.2342.19200300.100.1.25", "DC"),
    ("0.9.2342.19200300.100.1.1", "UID"),
];

/// The subject of the DER certificate `cert`, as RFC 4514 renders it; `None` when the
/// certificate's structure is not one this reader follows.
pub fn subject_of(cert: &[u8]) -> Option<String> {
    let (t, certificate, _) = element(cert)?;
    if t != tag::SEQUENCE {
        return None;
    }
    let (t, mut tbs, _) = element(certificate)?;
    if t != tag::SEQUENCE {
        return None;
    }
    let mut next = || -> Option<(u8, &[u8])> {
        let (t, content, rest) = element(tbs)?;
        tbs = rest;
        Some((t, content))
    };
    let mut field = next()?;
    if field.0 == tag::VERSION {
        field = next()?;
    }
    // serialNumber, then signature, issuer and validity (sequences), then the subject.
    if field.0 != tag::INTEGER {
        return None;
    }
    for _ in 0..3 {
        if next()?.0 != tag::SEQUENCE {
            return None;
        }
    }
    let (t, name) = next()?;
    if t != tag::SEQUENCE {
        return None;
    }
    render_name(name)
}

/// A Name's content (a sequence of RDN sets), rendered last RDN first.
fn render_name(name: &[u8]) -> Option<String> {
    let rdns = children(name, tag::SET)?;
    let mut rendered = rdns
        .into_iter()
        .map(render_rdn)
        .collect::<Option<Vec<_>>>()?;
    rendered.reverse();
    Some(rendered.join(","))
}

/// One RDN's attributes, last first, joined by `+`.
fn render_rdn(set: &[u8]) -> Option<String> {
    let attributes = children(set, tag::SEQUENCE)?;
    let mut rendered = attributes
        .into_iter()
        .map(render_attribute)
        .collect::<Option<Vec<_>>>()?;
    rendered.reverse();
    (!rendered.is_empty()).then(|| rendered.join("+"))
}

/// The contents of the elements making up `content`, each of which must be tagged `want`.
fn children(mut content: &[u8], want: u8) -> Option<Vec<&[u8]>> {
    let mut out = Vec::new();
    while !content.is_empty() {
        let (t, child, rest) = element(content)?;
        if t != want {
            return None;
        }
        out.push(child);
        content = rest;
    }
    Some(out)
}

/// `type=value` for one AttributeTypeAndValue.
fn render_attribute(attribute: &[u8]) -> Option<String> {
    let (t, oid, value_tlv) = element(attribute)?;
    if t != tag::OID {
        return None;
    }
    let (value_tag, value, after) = element(value_tlv)?;
    if !after.is_empty() {
        return None;
    }
    let dotted = dotted_oid(oid)?;
    let short = SHORT_NAMES
        .iter()
        .find(|(o, _)| *o == dotted)
        .map(|(_, s)| *s);
    let text = short.and_then(|_| string_value(value_tag, value));
    Some(match (short, text) {
        (Some(name), Some(text)) => format!("{name}={}", escape(&text)),
        (name, _) => format!("{}=#{}", name.unwrap_or(&dotted), hex::encode(value_tlv)),
    })
}

/// The text of a directory string value; `None` for other types or malformed text.
fn string_value(t: u8, bytes: &[u8]) -> Option<String> {
    match t {
        tag::UTF8 | tag::PRINTABLE | tag::IA5 | tag::NUMERIC | tag::VISIBLE => {
            String::from_utf8(bytes.to_vec()).ok()
        }
        // T.61 read as Latin-1, as OpenSSL reads it.
        tag::TELETEX => Some(bytes.iter().map(|&b| char::from(b)).collect()),
        tag::BMP => {
            let units: Vec<u16> = bytes
                .chunks(2)
                .map(|c| match c {
                    [a, b] => Some(u16::from_be_bytes([*a, *b])),
                    _ => None,
                })
                .collect::<Option<_>>()?;
            String::from_utf16(&units).ok()
        }
        tag::UNIVERSAL => bytes
            .chunks(4)
            .map(|c| match c {
                [a, b, c, d] => char::from_u32(u32::from_be_bytes([*a, *b, *c, *d])),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// RFC 4514 §2.4 escaping of a string value.
fn escape(value: &str) -> String {
    let last = value.chars().count().saturating_sub(1);
    let mut out = String::with_capacity(value.len());
    for (i, c) in value.chars().enumerate() {
        match c {
            '"' | '+' | ',' | ';' | '<' | '>' | '\\' => out.push('\\'),
            '#' if i == 0 => out.push('\\'),
            ' ' if i == 0 || i == last => out.push('\\'),
            '\0' => {
                out.push_str("\\00");
                continue;
            }
            _ => {}
        }
        out.push(c);
    }
    out
}

/// An OID's content in dotted decimal; `None` when malformed or beyond 64-bit arcs.
fn dotted_oid(content: &[u8]) -> Option<String> {
    let mut arcs: Vec<u64> = Vec::new();
    let mut value = 0u64;
    let mut pending = false;
    for &b in content {
        if !pending && b == 0x80 {
            return None; // a non-minimal encoding
        }
        value = value.checked_mul(128)?.checked_add(u64::from(b & 0x7F))?;
        pending = b & 0x80 != 0;
        if !pending {
            arcs.push(value);
            value = 0;
        }
    }
    let first = *arcs.first()?;
    if pending {
        return None;
    }
    let (a, b) = match first {
        0..40 => (0, first),
        40..80 => (1, first - 40),
        _ => (2, first - 80),
    };
    let mut dotted = format!("{a}.{b}");
    for arc in &arcs[1..] {
        dotted.push_str(&format!(".{arc}"));
    }
    Some(dotted)
}

/// The first DER element of `input`: its tag, its content, and what follows it. Definite
/// lengths only (DER has no other), of at most four length octets.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&t, rest) = input.split_first()?;
    if t & 0x1F == 0x1F {
        return None; // multi-octet tags occur nowhere this module reads
    }
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let octets = usize::from(first & 0x7F);
        if octets == 0 || octets > 4 || rest.len() < octets {
            return None;
        }
        let (len_bytes, after) = rest.split_at(octets);
        rest = after;
        len_bytes
            .iter()
            .fold(0usize, |n, &b| (n << 8) | usize::from(b))
    };
    if rest.len() < len {
        return None;
    }
    let (content, after) = rest.split_at(len);
    Some((t, content, after))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `t`, `len`, then `content`, for lengths under 128.
    fn tlv(t: u8, content: &[u8]) -> Vec<u8> {
        let mut v = vec![t, u8::try_from(content.len()).unwrap()];
        v.extend_from_slice(content);
        v
    }

    fn attribute(oid: &[u8], t: u8, value: &[u8]) -> Vec<u8> {
        tlv(tag::SEQUENCE, &[tlv(tag::OID, oid), tlv(t, value)].concat())
    }

    const CN: [u8; 3] = [0x55, 0x04, 0x03];
    const O: [u8; 3] = [0x55, 0x04, 0x0A];

    #[test]
    fn rdns_are_rendered_last_first_and_multi_valued_ones_joined_by_plus() {
        let name = [
            tlv(tag::SET, &attribute(&O, tag::UTF8, b"Acme")),
            tlv(
                tag::SET,
                &[
                    attribute(&CN, tag::UTF8, b"agent-1"),
                    attribute(&CN, tag::PRINTABLE, b"two"),
                ]
                .concat(),
            ),
        ]
        .concat();
        assert_eq!(
            render_name(&name).as_deref(),
            Some("CN=two+CN=agent-1,O=Acme")
        );
    }

    #[test]
    fn special_characters_are_escaped_as_rfc_4514_says() {
        assert_eq!(escape("a,b+c\"d\\e<f>g;h"), r#"a\,b\+c\"d\\e\<f\>g\;h"#);
        assert_eq!(escape("#lead"), r"\#lead");
        assert_eq!(escape("mid#dle"), "mid#dle");
        assert_eq!(escape(" both "), r"\ both\ ");
        assert_eq!(escape("nul\0"), r"nul\00");
        assert_eq!(escape("é"), "é");
    }

    #[test]
    fn unknown_types_are_dotted_oids_with_the_value_in_hex() {
        // emailAddress, 1.2.840.113549.1.9.1, an IA5String.
        let oid = [0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x09, 0x01];
        let a = attribute(&oid, tag::IA5, b"a@b");
        let (_, content, _) = element(&a).unwrap();
        assert_eq!(
            render_attribute(content).as_deref(),
            Some("1.2.840.113549.1.9.1=#1603614062")
        );
    }

    #[test]
    fn bmp_and_universal_strings_are_decoded() {
        assert_eq!(
            string_value(tag::BMP, &[0, b'h', 0, 0xE9]).as_deref(),
            Some("hé")
        );
        assert_eq!(
            string_value(tag::UNIVERSAL, &[0, 0, 0, b'x']).as_deref(),
            Some("x")
        );
        assert_eq!(string_value(tag::BMP, &[0]), None);
    }

    #[test]
    fn malformed_input_yields_none_never_a_panic() {
        for bad in [
            &[][..],
            &[0x30],
            &[0x30, 0x85, 1, 1, 1, 1, 1],
            &[0x30, 0x05, 0x30],
            &[0x1F, 0x01, 0x00],
            &[0x30, 0x82, 0xFF],
        ] {
            assert_eq!(subject_of(bad), None, "{bad:?}");
        }
        assert_eq!(dotted_oid(&[0x2A, 0x80, 0x01]), None);
        assert_eq!(dotted_oid(&[0x2A, 0x86]), None);
        assert_eq!(dotted_oid(&[]), None);
    }
}
