//! Bytes as lowercase hex text, and random tokens made of it: spill file and cgroup names here;
//! the host's owner tokens, HTTP bearer token, big-number marker nonce and cache entry names.

use std::fmt::Write as _;

/// `bytes` as two lowercase hex digits each.
pub fn hex(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        // Writing to a String cannot fail.
        let _ = write!(text, "{b:02x}");
    }
    text
}

/// `len` bytes from the OS random source, as hex.
pub fn random_token(len: usize) -> Result<String, getrandom::Error> {
    let mut bytes = vec![0u8; len];
    getrandom::fill(&mut bytes)?;
    Ok(hex(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_lowercase_digits_per_byte() {
        assert_eq!(hex(&[0x00, 0x0f, 0xa0, 0xff]), "000fa0ff");
        assert_eq!(hex(&[]), "");
        let token = random_token(16).unwrap();
        assert_eq!(token.len(), 32);
        assert_ne!(token, random_token(16).unwrap());
    }
}
