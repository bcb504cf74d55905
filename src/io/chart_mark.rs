//! The mark of the charts this crate draws: a PNG text chunk, so that a chart of ours may be
//! replaced by a new one and any other image may not.

/// The PNG text chunk's content that marks the charts this crate draws (`Software`, then the
/// crate's name): a chart of ours may be replaced by a new one, any other image may not.
const CHART_MARK: &[u8] = b"Software\0layernorm-scaling";

/// `png` (a whole PNG file) with the text chunk that marks our charts added before its end.
pub fn mark_chart(mut png: Vec<u8>) -> std::io::Result<Vec<u8>> {
    // The last chunk is IEND: 4 bytes of length (0), "IEND", 4 bytes of CRC.
    if png.len() < 20 || &png[png.len() - 8..png.len() - 4] != b"IEND" {
        return Err(std::io::Error::other("not a PNG file that ends with IEND"));
    }
    let mut chunk = (CHART_MARK.len() as u32).to_be_bytes().to_vec();
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(b"tEXt");
    hasher.update(CHART_MARK);
    chunk.extend_from_slice(b"tEXt");
    chunk.extend_from_slice(CHART_MARK);
    chunk.extend_from_slice(&hasher.finalize().to_be_bytes());
    let end = png.len() - 12;
    png.splice(end..end, chunk);
    Ok(png)
}

/// Whether `bytes` are a PNG chart this crate drew ([`mark_chart`]).
pub fn is_our_chart(bytes: &[u8]) -> bool {
    let mark = [b"tEXt".as_slice(), CHART_MARK].concat();
    bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.windows(mark.len()).any(|window| window == mark)
}
