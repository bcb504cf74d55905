//! TFRecord framing, the container of TensorBoard's event files: each record is
//!
//! ```text
//! length: u64 LE | masked_crc32c(length bytes): u32 LE | data: length bytes | masked_crc32c(data): u32 LE
//! masked_crc32c(x) = ((crc >> 15) | (crc << 17)) + 0xa282ead8   (a rotation, wrapping; crc = CRC-32C of x)
//! ```
//!
//! A record cut short (a process killed while it wrote) or failing its checksums ends the
//! readable part of a file: readers drop it and what follows.

use prost::Message;

use super::proto::Event;

/// The masked CRC-32C of `bytes`, as TFRecord stores it.
pub fn masked_crc(bytes: &[u8]) -> u32 {
    let crc = crc32c::crc32c(bytes);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// `data` framed as one record.
pub fn frame(data: &[u8]) -> Vec<u8> {
    let length = (data.len() as u64).to_le_bytes();
    let mut record = Vec::with_capacity(data.len() + 16);
    record.extend_from_slice(&length);
    record.extend_from_slice(&masked_crc(&length).to_le_bytes());
    record.extend_from_slice(data);
    record.extend_from_slice(&masked_crc(data).to_le_bytes());
    record
}

/// The records of `bytes` in order, up to the first that is cut short or fails a checksum, and
/// whether such a record ended the reading (the bytes from there on are dropped).
pub fn read_records(bytes: &[u8]) -> (Vec<&[u8]>, bool) {
    let mut records = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let Some(record) = next_record(rest) else { return (records, true) };
        records.push(record);
        rest = &rest[record.len() + 16..];
    }
    (records, false)
}

/// The events of an event file's `bytes` in order, up to the first record that is cut short,
/// fails a checksum or is not an event, and whether such a record ended the reading.
pub fn read_events(bytes: &[u8]) -> (Vec<Event>, bool) {
    let (records, mut torn) = read_records(bytes);
    let mut events = Vec::with_capacity(records.len());
    for record in records {
        match Event::decode(record) {
            Ok(event) => events.push(event),
            Err(_) => {
                torn = true;
                break;
            }
        }
    }
    (events, torn)
}

/// The data of the record at the start of `bytes`, if it is whole and its checksums hold.
fn next_record(bytes: &[u8]) -> Option<&[u8]> {
    let length_bytes = bytes.get(..8)?;
    let length_crc = u32::from_le_bytes(bytes.get(8..12)?.try_into().ok()?);
    if masked_crc(length_bytes) != length_crc {
        return None;
    }
    let length = usize::try_from(u64::from_le_bytes(length_bytes.try_into().ok()?)).ok()?;
    let end = 12usize.checked_add(length)?;
    let data = bytes.get(12..end)?;
    let data_crc = u32::from_le_bytes(bytes.get(end..end.checked_add(4)?)?.try_into().ok()?);
    (masked_crc(data) == data_crc).then_some(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_crc_of_known_values() {
        // CRC-32C("123456789") = 0xe3069283 (the Castagnoli polynomial's check value), masked
        // by hand: ((c >> 15) | (c << 17)) + 0xa282ead8 = 0x2507c60d + 0xa282ead8.
        assert_eq!(masked_crc(b"123456789"), 0xc78a_b0e5);
    }

    #[test]
    fn records_read_back_and_a_torn_one_is_dropped() {
        let mut file = frame(b"first");
        file.extend(frame(b""));
        file.extend(frame(b"third record"));
        assert_eq!(read_records(&file), (vec![&b"first"[..], b"", b"third record"], false));
        let whole = file.len();
        for cut in whole - frame(b"third record").len() + 1..whole {
            let (records, torn) = read_records(&file[..cut]);
            assert_eq!((records.len(), torn), (2, true), "cut at byte {cut}");
        }
        let mut flipped = file.clone();
        flipped[whole - 6] ^= 1;
        assert_eq!(read_records(&flipped), (vec![&b"first"[..], b""], true));
    }
}
