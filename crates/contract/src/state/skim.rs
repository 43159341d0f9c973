//! A fast path through the one part of a state document that is nearly all of it: the top-level
//! `resources` array (spec: Terraform State "What CAPTF reads from state"). It finds that array
//! and counts its managed entries with a byte-level scanner, so the serde reader only has to parse
//! the few fields around it.
//!
//! The scanner accepts no more than `serde_json` does where `resources` is deserialized as
//! [`super::ManagedCount`]: it is stricter in places (escaped keys, non-object entries, `mode`
//! values other than `null` or a plain string, a duplicated `mode`), and says "not sure" there
//! instead of deciding, so the caller falls back to the serde reader for the whole document and
//! every result and error stays what it was.
//!
//! It reads from a [`Source`] that may still be growing — the gunzip of the chunks — so each part
//! of the document is scanned just after it is inflated, while it is still in cache, instead of
//! in a second pass over 64 MiB. It tells the source which bytes of `resources` it is done with,
//! so that the source need not keep them: the caller needs only what lies around that array.

use std::ops::Range;

/// Bytes that may arrive a piece at a time. Once handed out, bytes never change: more only ever
/// appends, and drops only bytes the scan said it is done with.
pub(super) trait Source {
    /// The bytes so far, from offset [`Source::start`] of the document on.
    fn data(&self) -> &[u8];
    /// The document offset of `data()[0]`: 0 until some bytes were dropped.
    fn start(&self) -> usize;
    /// Appends more bytes; `false` once there are none to come. The bytes of `done` (a range of
    /// document offsets inside `resources`, empty at first) are never looked at again and may be
    /// dropped; `done` only ever grows at its end.
    fn more(&mut self, done: Range<usize>) -> bool;
}

impl Source for &[u8] {
    fn data(&self) -> &[u8] {
        self
    }

    fn start(&self) -> usize {
        0
    }

    fn more(&mut self, _done: Range<usize>) -> bool {
        false
    }
}

/// The top-level `resources` value of a document: its byte range and its managed entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Resources {
    /// The offset of its `[`.
    pub start: usize,
    /// The offset just past its `]`.
    pub end: usize,
    /// Entries whose `mode` is `managed`.
    pub managed: u64,
}

/// Finds the top-level `resources` array of `document` and counts its managed entries; `None`
/// when there is no such array or anything on the way is not plainly what `serde_json` reads
/// the same way (the caller then parses the whole document with serde).
pub(super) fn skim_resources<S: Source>(source: &mut S) -> Option<Resources> {
    let mut cursor = Cursor {
        source,
        at: 0,
        frames: Vec::new(),
        resources: None,
        keep: 0,
    };
    cursor.expect(b'{')?;
    if cursor.peek()? == b'}' {
        return None;
    }
    loop {
        let is_resources = cursor.key_is(b"resources")?;
        cursor.expect(b':')?;
        if is_resources {
            cursor.skip_whitespace();
            let start = cursor.at;
            cursor.resources = Some(start);
            let managed = cursor.resource_list()?;
            return Some(Resources {
                start,
                end: cursor.at,
                managed,
            });
        }
        cursor.skip_value()?;
        if cursor.next()? != b',' {
            return None;
        }
    }
}

/// The offset of the first quote, backslash or control character among the first
/// [`SHORT_STRING`] bytes of `bytes`, looked for a word at a time (most strings in a state are
/// short, too short for `memchr` to pay off); `Err(n)` when the first `n` bytes hold none.
fn special_in_words(bytes: &[u8]) -> Result<usize, usize> {
    const ONES: u64 = u64::MAX / 255;
    const HIGH: u64 = ONES << 7;
    let mut at = 0;
    for word in bytes[..bytes.len().min(SHORT_STRING)].chunks_exact(8) {
        let mut array = [0u8; 8];
        array.copy_from_slice(word);
        let word = u64::from_le_bytes(array);
        let quote = word ^ (ONES * u64::from(b'"'));
        let backslash = word ^ (ONES * u64::from(b'\\'));
        // The lowest byte flagged in each term is exactly the first such byte (a borrow only
        // runs upwards from a flagged byte), so the lowest bit of the union is the first special.
        let mask = ((quote.wrapping_sub(ONES) & !quote)
            | (backslash.wrapping_sub(ONES) & !backslash)
            | (word.wrapping_sub(ONES * 0x20) & !word))
            & HIGH;
        if mask != 0 {
            return Ok(at + (mask.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    Err(at)
}

/// How far into a string [`special_in_words`] looks before `memchr` takes over.
const SHORT_STRING: usize = 32;

/// Whether `bytes` holds no control character, which JSON strings may not (written as a fold so
/// that it compiles to vector compares).
fn no_control(bytes: &[u8]) -> bool {
    bytes.iter().fold(u8::MAX, |least, &b| least.min(b)) >= 0x20
}

struct Cursor<'s, S> {
    source: &'s mut S,
    at: usize,
    /// Open arrays (`true`) and objects (`false`) of the value being skipped.
    frames: Vec<bool>,
    /// Where `resources` starts, once the scan is in it.
    resources: Option<usize>,
    /// The first byte the scan may still look at again (a key it is reading).
    keep: usize,
}

impl<S: Source> Cursor<'_, S> {
    /// The bytes of `resources` the scan is done with.
    fn done(&self) -> Range<usize> {
        match self.resources {
            Some(start) if self.keep > start => start..self.keep,
            _ => 0..0,
        }
    }

    /// Asks the source for more bytes; `false` once there are none to come.
    fn more(&mut self) -> bool {
        let done = self.done();
        self.source.more(done)
    }

    /// The bytes from document offset `at` on that have arrived (`at` is never before
    /// [`Cursor::keep`], so never dropped).
    #[inline]
    fn from(&self, at: usize) -> &[u8] {
        &self.source.data()[at - self.source.start()..]
    }

    /// The document offset just past the bytes that have arrived.
    #[inline]
    fn arrived(&self) -> usize {
        self.source.start() + self.source.data().len()
    }

    /// Whether the bytes up to `end` have arrived (waiting for them if need be).
    fn ensure(&mut self, end: usize) -> bool {
        while self.arrived() < end {
            if !self.more() {
                return false;
            }
        }
        true
    }

    #[inline]
    fn byte(&mut self, at: usize) -> Option<u8> {
        if self.ensure(at + 1) {
            Some(self.from(at)[0])
        } else {
            None
        }
    }

    fn span(&mut self, start: usize, len: usize) -> Option<&[u8]> {
        let end = start.checked_add(len)?;
        if self.ensure(end) {
            Some(&self.from(start)[..len])
        } else {
            None
        }
    }

    /// Skips JSON whitespace, the four bytes `serde_json` treats as such.
    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.byte(self.at) {
            self.at += 1;
        }
    }

    /// The next significant byte, not consumed.
    #[inline]
    fn peek(&mut self) -> Option<u8> {
        match self.from(self.at).first() {
            Some(&b) if !matches!(b, b' ' | b'\n' | b'\t' | b'\r') => Some(b),
            _ => {
                self.skip_whitespace();
                self.byte(self.at)
            }
        }
    }

    /// The next significant byte, consumed.
    #[inline]
    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.at += 1;
        Some(b)
    }

    #[inline]
    fn expect(&mut self, want: u8) -> Option<()> {
        (self.next()? == want).then_some(())
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        (self.span(self.at, word.len())? == word).then(|| self.at += word.len())
    }

    /// Reads an object key with no escape in it and valid UTF-8 (as `serde_json` requires of a
    /// key it matches against field names); whether it is `name`.
    fn key_is(&mut self, name: &[u8]) -> Option<bool> {
        self.expect(b'"')?;
        let start = self.at;
        let escaped = self.string_body()?;
        let raw = &self.from(start)[..self.at - 1 - start];
        (!escaped && std::str::from_utf8(raw).is_ok()).then(|| raw == name)
    }

    /// Skips the rest of a string after its opening quote; whether it held an escape. `None` on
    /// a control character, a bad escape or the end of input.
    fn string_body(&mut self) -> Option<bool> {
        let mut escaped = false;
        loop {
            let rest = self.from(self.at);
            let found = match special_in_words(rest) {
                Ok(end) => Some(end),
                Err(plain) => {
                    let tail = &rest[plain..];
                    let end = memchr::memchr2(b'"', b'\\', tail);
                    if !no_control(&tail[..end.unwrap_or(tail.len())]) {
                        return None;
                    }
                    Some(plain + end.unwrap_or(tail.len())).filter(|_| end.is_some())
                }
            };
            let Some(end) = found else {
                self.at += rest.len();
                if !self.more() {
                    return None;
                }
                continue;
            };
            let special = rest[end];
            self.at += end + 1;
            match special {
                b'"' => return Some(escaped),
                b'\\' => {
                    escaped = true;
                    self.escape()?;
                }
                _ => return None,
            }
        }
    }

    /// One escape after its backslash: `"\/bfnrt`, or `u` and four hex digits.
    fn escape(&mut self) -> Option<()> {
        let b = self.byte(self.at)?;
        self.at += 1;
        match b {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(()),
            b'u' => {
                let hex = self.span(self.at, 4)?.iter().all(u8::is_ascii_hexdigit);
                self.at += 4;
                hex.then_some(())
            }
            _ => None,
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while let Some(b'0'..=b'9') = self.byte(self.at) {
            self.at += 1;
        }
        self.at - start
    }

    /// A number after its optional minus sign: `0` or a digit run not starting with `0`, then an
    /// optional fraction and exponent, each with at least one digit.
    fn number(&mut self) -> Option<()> {
        match self.byte(self.at)? {
            b'0' => {
                self.at += 1;
                if let Some(b'0'..=b'9') = self.byte(self.at) {
                    return None;
                }
            }
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return None,
        }
        if self.byte(self.at) == Some(b'.') {
            self.at += 1;
            if self.digits() == 0 {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.byte(self.at) {
            self.at += 1;
            if let Some(b'+' | b'-') = self.byte(self.at) {
                self.at += 1;
            }
            if self.digits() == 0 {
                return None;
            }
        }
        Some(())
    }

    /// One scalar, or the opening of an array or object (pushed on `frames`).
    fn value_start(&mut self) -> Option<()> {
        match self.next()? {
            b'n' => self.literal(b"ull"),
            b't' => self.literal(b"rue"),
            b'f' => self.literal(b"alse"),
            b'-' => self.number(),
            b'0'..=b'9' => {
                self.at -= 1;
                self.number()
            }
            b'"' => self.string_body().map(drop),
            b'[' => {
                self.frames.push(true);
                Some(())
            }
            b'{' => {
                self.frames.push(false);
                Some(())
            }
            _ => None,
        }
    }

    /// Skips one whole value, however deep (iteratively, as `serde_json` skips ignored values).
    fn skip_value(&mut self) -> Option<()> {
        self.frames.clear();
        self.value_start()?;
        // Whether the innermost open container was just opened (so may close at once, and takes
        // no comma before its first member).
        let mut fresh = true;
        while let Some(&array) = self.frames.last() {
            self.keep = self.at;
            let b = self.peek()?;
            let closes = if array { b == b']' } else { b == b'}' };
            if closes {
                self.at += 1;
                self.frames.pop();
                fresh = false;
                continue;
            }
            if !fresh {
                self.expect(b',')?;
            }
            if !array {
                self.expect(b'"')?;
                self.string_body()?;
                self.expect(b':')?;
            }
            let depth = self.frames.len();
            self.value_start()?;
            fresh = self.frames.len() > depth;
        }
        Some(())
    }

    /// The `resources` array: objects only, counting those whose `mode` is `managed`.
    fn resource_list(&mut self) -> Option<u64> {
        self.expect(b'[')?;
        let mut managed = 0u64;
        if self.peek()? == b']' {
            self.at += 1;
            return Some(managed);
        }
        loop {
            self.keep = self.at;
            if self.resource()? {
                managed += 1;
            }
            match self.next()? {
                b',' => {}
                b']' => return Some(managed),
                _ => return None,
            }
        }
    }

    /// One entry of `resources`: whether its `mode` is `managed`. Its other members are skipped.
    fn resource(&mut self) -> Option<bool> {
        self.expect(b'{')?;
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(false);
        }
        let mut mode: Option<bool> = None;
        loop {
            self.keep = self.at;
            let is_mode = self.key_is(b"mode")?;
            self.expect(b':')?;
            if is_mode {
                if mode.is_some() {
                    return None;
                }
                mode = Some(self.mode()?);
            } else {
                self.skip_value()?;
            }
            match self.next()? {
                b',' => {}
                b'}' => return Some(mode == Some(true)),
                _ => return None,
            }
        }
    }

    /// A `mode` value: `null` or a string without escapes; whether it is `managed`.
    fn mode(&mut self) -> Option<bool> {
        match self.next()? {
            b'n' => self.literal(b"ull").map(|()| false),
            b'"' => {
                self.at -= 1;
                self.key_is(b"managed")
            }
            _ => None,
        }
    }
}
