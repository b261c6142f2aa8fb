//! The user a client certificate names, as RabbitMQ derives it (`ssl_cert_login_from`): the
//! subject's common name, or the whole subject as an RFC 4514 distinguished name
//! (`CN=client,O=Example,C=GB`: the last RDN first, values escaped).
//!
//! A small DER reader walks to the certificate's subject and nothing else, so certificate
//! login needs no X.509 library. The certificate was verified by rustls before it gets here;
//! still, any byte string is handled without panicking (`None` when it is not a certificate).

/// Which part of a client certificate names its user (`ssl_cert_login_from`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LoginFrom {
    /// The whole subject as a distinguished name (RabbitMQ's default).
    #[default]
    DistinguishedName,
    /// The subject's common name.
    CommonName,
}

/// The user the DER certificate `der` names, or `None` when it names none (no subject, or
/// no common name when that is what counts).
pub fn login_name(der: &[u8], from: LoginFrom) -> Option<String> {
    let subject = Subject::from_certificate(der)?;
    match from {
        LoginFrom::CommonName => subject.common_name(),
        LoginFrom::DistinguishedName => {
            Some(subject.distinguished_name()).filter(|name| !name.is_empty())
        }
    }
}

/// One attribute of a subject: its type (an OID, DER content bytes) and its value as text.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Attribute {
    oid: Vec<u8>,
    value: String,
}

/// The subject of an X.509 certificate: its relative distinguished names in certificate
/// order, each a set of one or more attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    rdns: Vec<Vec<Attribute>>,
}

/// DER tags this reader needs.
const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const INTEGER: u8 = 0x02;
const OID: u8 = 0x06;
const VERSION: u8 = 0xA0;

/// The OID of commonName (2.5.4.3), DER content bytes.
const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];

/// Attribute types RabbitMQ writes by name in a distinguished name; others are written as a
/// dotted OID (RFC 4514 section 2.3).
const ATTRIBUTE_NAMES: &[(&[u8], &str)] = &[
    (&[0x55, 0x04, 0x04], "SN"),
    (&[0x55, 0x04, 0x2A], "GIVENNAME"),
    (&[0x55, 0x04, 0x2B], "INITIALS"),
    (&[0x55, 0x04, 0x2C], "GENERATIONQUALIFIER"),
    (COMMON_NAME, "CN"),
    (&[0x55, 0x04, 0x07], "L"),
    (&[0x55, 0x04, 0x08], "ST"),
    (&[0x55, 0x04, 0x0A], "O"),
    (&[0x55, 0x04, 0x0B], "OU"),
    (&[0x55, 0x04, 0x0C], "TITLE"),
    (&[0x55, 0x04, 0x06], "C"),
    (&[0x55, 0x04, 0x05], "SERIALNUMBER"),
    (&[0x55, 0x04, 0x41], "PSEUDONYM"),
    (
        &[0x09, 0x92, 0x26, 0x89, 0x93, 0xF2, 0x2C, 0x64, 0x01, 0x19],
        "DC",
    ),
    (
        &[0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x09, 0x01],
        "EMAILADDRESS",
    ),
    (&[0x55, 0x04, 0x09], "STREET"),
    (
        &[0x09, 0x92, 0x26, 0x89, 0x93, 0xF2, 0x2C, 0x64, 0x01, 0x01],
        "UID",
    ),
];

impl Subject {
    /// The subject of the DER-encoded certificate `der`, or `None` when `der` is not a
    /// certificate this reader understands.
    pub fn from_certificate(der: &[u8]) -> Option<Subject> {
        let (certificate, _) = expect(der, SEQUENCE)?;
        let (mut tbs, _) = expect(certificate, SEQUENCE)?;
        // version [0] EXPLICIT (absent in v1 certificates), then serialNumber, signature,
        // issuer, validity, and the subject.
        if tbs.first() == Some(&VERSION) {
            tbs = next(tbs)?.2;
        }
        let (_, tbs) = expect(tbs, INTEGER)?;
        let (_, tbs) = expect(tbs, SEQUENCE)?;
        let (_, tbs) = expect(tbs, SEQUENCE)?;
        let (_, tbs) = expect(tbs, SEQUENCE)?;
        let (mut name, _) = expect(tbs, SEQUENCE)?;
        let mut rdns = Vec::new();
        while !name.is_empty() {
            let (mut set, rest) = expect(name, SET)?;
            name = rest;
            let mut rdn = Vec::new();
            while !set.is_empty() {
                let (pair, rest) = expect(set, SEQUENCE)?;
                set = rest;
                let (oid, pair) = expect(pair, OID)?;
                let (tag, value, _) = next(pair)?;
                rdn.push(Attribute {
                    oid: oid.to_vec(),
                    value: string_value(tag, value)?,
                });
            }
            rdns.push(rdn);
        }
        Some(Subject { rdns })
    }

    /// The common name(s), joined with `,` when there are several (as RabbitMQ does), or
    /// `None` when the subject has none.
    pub fn common_name(&self) -> Option<String> {
        let names: Vec<&str> = self
            .rdns
            .iter()
            .flatten()
            .filter(|attribute| attribute.oid == COMMON_NAME)
            .map(|attribute| attribute.value.as_str())
            .collect();
        (!names.is_empty()).then(|| names.join(","))
    }

    /// The subject as RabbitMQ writes it: RFC 4514, the last RDN first, multi-valued RDNs
    /// joined with `+`, values escaped.
    pub fn distinguished_name(&self) -> String {
        let rdns: Vec<String> = self
            .rdns
            .iter()
            .rev()
            .map(|rdn| {
                rdn.iter()
                    .map(|attribute| {
                        format!(
                            "{}={}",
                            attribute_name(&attribute.oid),
                            escape(&attribute.value)
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("+")
            })
            .collect();
        rdns.join(",")
    }
}

/// The next DER element of `input`: its tag, its content and what follows it.
fn next(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (length, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        // Long form: the low bits count the length bytes; indefinite (0x80) is not DER.
        let count = usize::from(first & 0x7F);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let length = rest[..count]
            .iter()
            .fold(0usize, |length, byte| (length << 8) | usize::from(*byte));
        (length, &rest[count..])
    };
    if rest.len() < length {
        return None;
    }
    Some((tag, &rest[..length], &rest[length..]))
}

/// The next element of `input` when it has tag `tag`: its content and what follows.
fn expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (found, content, rest) = next(input)?;
    (found == tag).then_some((content, rest))
}

/// The text of a directory string; other types are written as `#` and their content in hex.
fn string_value(tag: u8, value: &[u8]) -> Option<String> {
    Some(match tag {
        // UTF8String, PrintableString, IA5String, VisibleString, NumericString.
        0x0C | 0x13 | 0x16 | 0x1A | 0x12 => String::from_utf8_lossy(value).into_owned(),
        // TeletexString: taken as ISO 8859-1, as RabbitMQ does.
        0x14 => value.iter().map(|byte| char::from(*byte)).collect(),
        // BMPString: UCS-2 big-endian.
        0x1E => char::decode_utf16(
            value
                .chunks_exact(2)
                .map(|pair| u16::from_be_bytes([pair[0], pair[1]])),
        )
        .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect(),
        // UniversalString: UCS-4 big-endian.
        0x1C => value
            .chunks_exact(4)
            .map(|quad| {
                char::from_u32(u32::from_be_bytes([quad[0], quad[1], quad[2], quad[3]]))
                    .unwrap_or(char::REPLACEMENT_CHARACTER)
            })
            .collect(),
        _ => {
            let mut text = String::from("#");
            for byte in value {
                text.push_str(&format!("{byte:02x}"));
            }
            text
        }
    })
}

/// The short name of an attribute type, or its dotted OID.
fn attribute_name(oid: &[u8]) -> String {
    if let Some((_, name)) = ATTRIBUTE_NAMES.iter().find(|(known, _)| *known == oid) {
        return (*name).to_string();
    }
    let mut arcs = Vec::new();
    let mut arc: u64 = 0;
    for byte in oid {
        arc = (arc << 7) | u64::from(byte & 0x7F);
        if byte & 0x80 == 0 {
            arcs.push(arc);
            arc = 0;
        }
    }
    let mut text = match arcs.first() {
        Some(first) if *first < 80 => format!("{}.{}", first / 40, first % 40),
        Some(first) => format!("2.{}", first - 80),
        None => return String::new(),
    };
    for arc in &arcs[1..] {
        text.push_str(&format!(".{arc}"));
    }
    text
}

/// Escapes a value as RabbitMQ does (RFC 4514): a leading space or `#`, a trailing space,
/// `"+,;<>\` with a backslash; control characters and every byte of a non-ASCII character
/// (and `~` and DEL) as `\XX`.
fn escape(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    let last = value.len().saturating_sub(1);
    for (index, byte) in value.bytes().enumerate() {
        match byte {
            b' ' | b'#' if index == 0 => {
                escaped.push('\\');
                escaped.push(char::from(byte));
            }
            b' ' if index == last => escaped.push_str("\\ "),
            b'"' | b'+' | b',' | b';' | b'<' | b'>' | b'\\' => {
                escaped.push('\\');
                escaped.push(char::from(byte));
            }
            byte if !(32..126).contains(&byte) => escaped.push_str(&format!("\\{byte:02X}")),
            byte => escaped.push(char::from(byte)),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// DER of `tag` around `content` (lengths below 64 KiB).
    fn der(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        match content.len() {
            n if n < 0x80 => out.push(n as u8),
            n if n < 0x100 => out.extend([0x81, n as u8]),
            n => out.extend([0x82, (n >> 8) as u8, n as u8]),
        }
        out.extend_from_slice(content);
        out
    }

    fn attribute(oid: &[u8], tag: u8, value: &[u8]) -> Vec<u8> {
        der(
            SET,
            &der(SEQUENCE, &[der(OID, oid), der(tag, value)].concat()),
        )
    }

    /// A certificate skeleton: only the fields before the subject have to be well formed.
    fn certificate(subject_rdns: &[Vec<u8>]) -> Vec<u8> {
        let tbs = [
            der(VERSION, &der(INTEGER, &[2])),
            der(INTEGER, &[1]),
            der(SEQUENCE, &[]),
            der(SEQUENCE, &attribute(COMMON_NAME, 0x0C, b"issuer")),
            der(SEQUENCE, &[]),
            der(SEQUENCE, &subject_rdns.concat()),
            der(SEQUENCE, &[]),
        ]
        .concat();
        der(
            SEQUENCE,
            &[der(SEQUENCE, &tbs), der(SEQUENCE, &[])].concat(),
        )
    }

    #[test]
    fn common_name_and_distinguished_name_as_rabbitmq_writes_them() {
        let der = certificate(&[
            attribute(&[0x55, 0x04, 0x06], 0x13, b"GB"),
            attribute(&[0x55, 0x04, 0x0A], 0x0C, b"Example, Inc."),
            attribute(COMMON_NAME, 0x0C, b"client-1"),
        ]);
        let subject = Subject::from_certificate(&der).expect("a subject");
        assert_eq!(subject.common_name().as_deref(), Some("client-1"));
        assert_eq!(
            subject.distinguished_name(),
            "CN=client-1,O=Example\\, Inc.,C=GB"
        );
    }

    #[test]
    fn unknown_types_are_dotted_and_odd_values_escaped() {
        // 1.2.3.4 with a leading '#' and a non-ASCII character.
        let der = certificate(&[attribute(&[0x2A, 0x03, 0x04], 0x0C, "#é ".as_bytes())]);
        let subject = Subject::from_certificate(&der).expect("a subject");
        assert_eq!(subject.common_name(), None);
        assert_eq!(subject.distinguished_name(), "1.2.3.4=\\#\\C3\\A9\\ ");
    }

    #[test]
    fn certificates_generated_by_rcgen_style_encoders_parse_with_several_common_names() {
        let der = certificate(&[
            attribute(COMMON_NAME, 0x13, b"a"),
            attribute(COMMON_NAME, 0x1E, &[0, b'b']),
        ]);
        let subject = Subject::from_certificate(&der).expect("a subject");
        assert_eq!(subject.common_name().as_deref(), Some("a,b"));
    }

    #[test]
    fn truncated_input_is_not_a_certificate() {
        let der = certificate(&[attribute(COMMON_NAME, 0x0C, b"client")]);
        for end in 0..der.len() {
            assert_eq!(Subject::from_certificate(&der[..end]), None, "{end}");
        }
    }

    proptest! {
        #[test]
        fn any_bytes_are_handled_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Some(subject) = Subject::from_certificate(&bytes) {
                let _ = subject.common_name();
                let _ = subject.distinguished_name();
            }
        }

        #[test]
        fn any_common_name_round_trips(name in "\\PC{1,40}") {
            let der = certificate(&[attribute(COMMON_NAME, 0x0C, name.as_bytes())]);
            let subject = Subject::from_certificate(&der).expect("a subject");
            prop_assert_eq!(subject.common_name(), Some(name));
        }
    }
}
