//! Readers under the corpus reader: one that counts the bytes read from disk (progress), and a
//! gzip reader that reads every member of a file as `gzip -d` does.

use std::cell::Cell;
use std::io::{BufRead, Read};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use flate2::bufread::GzDecoder;

/// The first bytes of a gzip file.
pub(super) const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];

/// A reader that adds the bytes it reads to a shared count (progress through a file on disk).
pub(super) struct Counted<R> {
    pub(super) inner: R,
    pub(super) count: Arc<AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// A reader that counts the bytes consumed from `inner`, with bytes put back in front of it
/// (read ahead to tell whether another gzip member follows).
pub(super) struct Tracked<R> {
    put_back: Vec<u8>,
    inner: R,
    /// Bytes consumed so far: the offset in the file of the next byte.
    at: u64,
}

impl<R: BufRead> Read for Tracked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = {
            let available = self.fill_buf()?;
            let n = available.len().min(buf.len());
            buf[..n].copy_from_slice(&available[..n]);
            n
        };
        self.consume(n);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Tracked<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        if self.put_back.is_empty() {
            self.inner.fill_buf()
        } else {
            Ok(&self.put_back)
        }
    }

    fn consume(&mut self, amount: usize) {
        self.at += amount as u64;
        if self.put_back.is_empty() {
            self.inner.consume(amount);
        } else {
            self.put_back.drain(..amount.min(self.put_back.len()));
        }
    }
}

impl<R: BufRead> Tracked<R> {
    /// The next two bytes, left unread (fewer at the end of the file).
    fn peek_two(&mut self) -> std::io::Result<Vec<u8>> {
        while self.put_back.len() < 2 {
            let buffer = self.inner.fill_buf()?;
            if buffer.is_empty() {
                break;
            }
            let n = buffer.len().min(2 - self.put_back.len());
            self.put_back.extend_from_slice(&buffer[..n]);
            self.inner.consume(n);
        }
        Ok(self.put_back.clone())
    }
}

/// Bytes after a gzip file's last member that start no other member: their offset in the file
/// and their count.
pub(crate) type TrailingBytes = Rc<Cell<Option<(u64, u64)>>>;

/// A gzip file read as `gzip -d` reads it: its members one after another (concatenated gzip
/// files, bgzip's blocks), and bytes after the last member that start no other (a download's or
/// a tape's padding: "trailing garbage") ignored, their offset kept in `trailing`. A damaged
/// member is an error naming the offset where it starts.
pub(super) struct GzipMembers<R: BufRead> {
    member: Option<GzDecoder<Tracked<R>>>,
    /// Where the member being read starts in the file.
    member_at: u64,
    trailing: TrailingBytes,
}

impl<R: BufRead> GzipMembers<R> {
    pub(super) fn new(inner: R, trailing: TrailingBytes) -> Self {
        let tracked = Tracked { put_back: Vec::new(), inner, at: 0 };
        Self { member: Some(GzDecoder::new(tracked)), member_at: 0, trailing }
    }

    /// `error`, met in the member starting at `member_at`, said as what it is.
    fn damaged(&self, error: std::io::Error) -> std::io::Error {
        let what = match error.kind() {
            std::io::ErrorKind::UnexpectedEof => "the gzip data is cut short (an interrupted download?)".to_string(),
            std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData => {
                format!("the gzip data is damaged ({error})")
            }
            // Not the data's fault: the disk's or the system's.
            _ => return error,
        };
        std::io::Error::new(
            error.kind(),
            format!("{what} in the gzip member that starts at byte {}; download or compress it again", self.member_at),
        )
    }
}

impl<R: BufRead> Read for GzipMembers<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let Some(member) = self.member.as_mut() else { return Ok(0) };
            let n = member.read(buf).map_err(|e| self.damaged(e))?;
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
            // The member ended: another follows, or the data ends here.
            let mut rest = self.member.take().map(GzDecoder::into_inner).expect("a member was being read");
            let next = rest.peek_two()?;
            if next.is_empty() {
                return Ok(0);
            }
            if next == GZIP_MAGIC {
                self.member_at = rest.at;
                self.member = Some(GzDecoder::new(rest));
                continue;
            }
            let at = rest.at;
            let count = std::io::copy(&mut rest, &mut std::io::sink())?;
            self.trailing.set(Some((at, count)));
            return Ok(0);
        }
    }
}
