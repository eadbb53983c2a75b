//! The few facts of an X.509 client certificate the errors need: who it names and when it is
//! valid. A small DER walk, not a validator: the API server validates; this only lets an
//! expired certificate be named as such before the server answers a bare 401.

/// A client certificate's identity and validity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Certificate {
    /// The subject's common name (the Kubernetes user, e.g. `system:node:worker-1`).
    pub common_name: String,
    /// The subject's organizations (the Kubernetes groups, e.g. `system:nodes`).
    pub organizations: Vec<String>,
    /// notBefore, seconds since the epoch.
    pub not_before: i64,
    /// notAfter, seconds since the epoch.
    pub not_after: i64,
}

impl Certificate {
    /// The first certificate of a PEM bundle.
    pub fn from_pem(pem_text: &[u8]) -> Result<Certificate, String> {
        let blocks = pem::parse_many(pem_text).map_err(|e| format!("not PEM: {e}"))?;
        let der = blocks
            .iter()
            .find(|b| b.tag() == "CERTIFICATE")
            .ok_or("no CERTIFICATE block")?;
        Certificate::from_der(der.contents())
    }

    /// Parses the DER of one certificate.
    pub fn from_der(der: &[u8]) -> Result<Certificate, String> {
        let bad = |what: &str| format!("not an X.509 certificate ({what})");
        let (cert, _) = tlv(der, 0x30).ok_or_else(|| bad("outer sequence"))?;
        let (tbs, _) = tlv(cert, 0x30).ok_or_else(|| bad("tbsCertificate"))?;
        let mut rest = tbs;
        if rest.first() == Some(&0xa0) {
            rest = skip(rest).ok_or_else(|| bad("version"))?;
        }
        rest = skip(rest).ok_or_else(|| bad("serial"))?; // serialNumber
        rest = skip(rest).ok_or_else(|| bad("signature"))?; // signature AlgorithmIdentifier
        rest = skip(rest).ok_or_else(|| bad("issuer"))?; // issuer
        let (validity, after) = tlv(rest, 0x30).ok_or_else(|| bad("validity"))?;
        let (nb_tag, nb, v_rest) = any_tlv(validity).ok_or_else(|| bad("notBefore"))?;
        let (na_tag, na, _) = any_tlv(v_rest).ok_or_else(|| bad("notAfter"))?;
        let not_before = time(nb_tag, nb).ok_or_else(|| bad("notBefore time"))?;
        let not_after = time(na_tag, na).ok_or_else(|| bad("notAfter time"))?;
        let (subject, _) = tlv(after, 0x30).ok_or_else(|| bad("subject"))?;
        let mut common_name = String::new();
        let mut organizations = Vec::new();
        let mut rdns = subject;
        while !rdns.is_empty() {
            let (set, next) = tlv(rdns, 0x31).ok_or_else(|| bad("subject RDN"))?;
            let mut atvs = set;
            while !atvs.is_empty() {
                let (atv, more) = tlv(atvs, 0x30).ok_or_else(|| bad("attribute"))?;
                let (oid, value) = tlv(atv, 0x06).ok_or_else(|| bad("attribute type"))?;
                let (_, text, _) = any_tlv(value).ok_or_else(|| bad("attribute value"))?;
                let text = String::from_utf8_lossy(text).into_owned();
                match oid {
                    [0x55, 0x04, 0x03] => common_name = text,
                    [0x55, 0x04, 0x0a] => organizations.push(text),
                    _ => {}
                }
                atvs = more;
            }
            rdns = next;
        }
        Ok(Certificate {
            common_name,
            organizations,
            not_before,
            not_after,
        })
    }

    /// `system:node:worker-1 (groups system:nodes)`.
    pub fn identity(&self) -> String {
        if self.organizations.is_empty() {
            self.common_name.clone()
        } else {
            format!(
                "{} (groups {})",
                self.common_name,
                self.organizations.join(", ")
            )
        }
    }
}

/// One TLV of tag `tag` at the start of `b`: (its contents, what follows).
fn tlv(b: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (t, c, rest) = any_tlv(b)?;
    (t == tag).then_some((c, rest))
}

fn skip(b: &[u8]) -> Option<&[u8]> {
    any_tlv(b).map(|(_, _, rest)| rest)
}

/// (tag, contents, rest) of the TLV at the start of `b` (DER: definite lengths only).
fn any_tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, b) = b.split_first()?;
    let (&first, b) = b.split_first()?;
    let (len, b) = if first < 0x80 {
        (first as usize, b)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || b.len() < n {
            return None;
        }
        let len = b[..n]
            .iter()
            .fold(0usize, |acc, &x| (acc << 8) | x as usize);
        (len, &b[n..])
    };
    (b.len() >= len).then(|| (tag, &b[..len], &b[len..]))
}

/// UTCTime (0x17, YYMMDDHHMMSSZ) or GeneralizedTime (0x18, YYYYMMDDHHMMSSZ) → Unix seconds.
fn time(tag: u8, b: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(b).ok()?.strip_suffix('Z')?;
    let (year, rest) = match tag {
        0x17 if s.len() == 12 => {
            let yy: i64 = s[..2].parse().ok()?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &s[2..])
        }
        0x18 if s.len() == 14 => (s[..4].parse().ok()?, &s[4..]),
        _ => return None,
    };
    let n = |i: usize| rest.get(i..i + 2)?.parse::<i64>().ok();
    let (month, day, h, m, sec) = (n(0)?, n(2)?, n(4)?, n(6)?, n(8)?);
    Some(days_from_civil(year, month, day) * 86400 + h * 3600 + m * 60 + sec)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// `2026-12-05 07:30:00 UTC`.
pub(crate) fn format_time(t: i64) -> String {
    let days = t.div_euclid(86400);
    let secs = t.rem_euclid(86400);
    // civil_from_days
    let z = days + 719468;
    let era = if z >= 0 { z } else { z - 146096 } / 146097;
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2026, 12, 5), 20792);
        assert_eq!(format_time(20792 * 86400 + 3661), "2026-12-05 01:01:01 UTC");
        assert_eq!(time(0x17, b"261205010101Z"), Some(20792 * 86400 + 3661));
        assert_eq!(time(0x18, b"20261205010101Z"), Some(20792 * 86400 + 3661));
        assert_eq!(time(0x17, b"2612050101Z"), None);
    }
}
