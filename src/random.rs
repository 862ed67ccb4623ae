//! Identifiers from the operating system's random source: the 2025-era
//! session ids and the task ids, which a third party must not guess.

/// `N` bytes from the operating system's random source, as `2 × N`
/// lowercase hex digits (visible ASCII: fit for a header value).
pub(crate) fn hex_id<const N: usize>() -> Result<String, getrandom::Error> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes)?;
    let mut id = String::with_capacity(2 * N);
    for b in bytes {
        id.push(char::from(HEX[usize::from(b >> 4)]));
        id.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_are_hex_of_the_asked_length_and_differ() {
        let a = super::hex_id::<16>().unwrap();
        let b = super::hex_id::<16>().unwrap();
        assert_eq!(a.len(), 32);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
        assert_ne!(a, b);
    }
}
