//! A small JSON reader that keeps the line of every value, for `.tf.json` and `.tofu.json` files
//! (serde_json's values carry no positions, and findings need lines).
//!
//! Strict RFC 8259 JSON, duplicate keys kept in order; nesting is bounded so no input can
//! overflow the stack.

/// The deepest nesting accepted.
const MAX_DEPTH: usize = 256;

/// A JSON value and the line it starts on.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonNode {
    /// 1-based line.
    pub line: u32,
    /// The value.
    pub value: JsonValue,
}

/// A JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum JsonValue {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number, as written.
    Number(String),
    /// A string, unescaped.
    String(String),
    /// An array.
    Array(Vec<JsonNode>),
    /// An object's members in document order (duplicates kept).
    Object(Vec<(String, JsonNode)>),
}

impl JsonNode {
    /// The members of an object (empty for anything else).
    pub fn members(&self) -> &[(String, JsonNode)] {
        match &self.value {
            JsonValue::Object(m) => m,
            _ => &[],
        }
    }

    /// The first member named `key`.
    pub fn get(&self, key: &str) -> Option<&JsonNode> {
        self.members()
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// The string value, if this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            JsonValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// The bool value, if this is a bool.
    pub fn as_bool(&self) -> Option<bool> {
        match self.value {
            JsonValue::Bool(b) => Some(b),
            _ => None,
        }
    }
}

/// Why a document is not JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    /// 1-based line of the problem.
    pub line: u32,
    /// What is wrong.
    pub message: String,
}

struct Parser<'a> {
    bytes: &'a [u8],
    pos: usize,
    line: u32,
}

/// Parses a whole document.
pub fn parse(text: &str) -> Result<JsonNode, JsonError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut p = Parser {
        bytes: text.as_bytes(),
        pos: 0,
        line: 1,
    };
    p.ws();
    let node = p.value(0)?;
    p.ws();
    if p.pos < p.bytes.len() {
        return Err(p.err("unexpected content after the JSON value"));
    }
    Ok(node)
}

impl Parser<'_> {
    fn err(&self, message: &str) -> JsonError {
        JsonError {
            line: self.line,
            message: message.to_owned(),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn bump(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.pos += 1;
        if b == b'\n' {
            self.line += 1;
        }
        Some(b)
    }

    fn ws(&mut self) {
        while let Some(b) = self.peek() {
            if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                self.bump();
            } else {
                break;
            }
        }
    }

    fn expect(&mut self, b: u8) -> Result<(), JsonError> {
        if self.peek() == Some(b) {
            self.bump();
            Ok(())
        } else {
            Err(self.err(&format!("expected `{}`", char::from(b))))
        }
    }

    fn literal(&mut self, word: &str) -> Result<(), JsonError> {
        if self.bytes[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(())
        } else {
            Err(self.err("invalid literal"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<JsonNode, JsonError> {
        if depth > MAX_DEPTH {
            return Err(self.err("nesting too deep"));
        }
        let line = self.line;
        let value = match self.peek() {
            None => return Err(self.err("unexpected end of input")),
            Some(b'{') => self.object(depth)?,
            Some(b'[') => self.array(depth)?,
            Some(b'"') => JsonValue::String(self.string()?),
            Some(b't') => {
                self.literal("true")?;
                JsonValue::Bool(true)
            }
            Some(b'f') => {
                self.literal("false")?;
                JsonValue::Bool(false)
            }
            Some(b'n') => {
                self.literal("null")?;
                JsonValue::Null
            }
            Some(b'-' | b'0'..=b'9') => JsonValue::Number(self.number()?),
            Some(_) => return Err(self.err("expected a JSON value")),
        };
        Ok(JsonNode { line, value })
    }

    fn object(&mut self, depth: usize) -> Result<JsonValue, JsonError> {
        self.expect(b'{')?;
        let mut members = Vec::new();
        self.ws();
        if self.peek() == Some(b'}') {
            self.bump();
            return Ok(JsonValue::Object(members));
        }
        loop {
            self.ws();
            if self.peek() != Some(b'"') {
                return Err(self.err("expected a string key"));
            }
            let key = self.string()?;
            self.ws();
            self.expect(b':')?;
            self.ws();
            let value = self.value(depth + 1)?;
            members.push((key, value));
            self.ws();
            match self.bump() {
                Some(b',') => {}
                Some(b'}') => return Ok(JsonValue::Object(members)),
                _ => return Err(self.err("expected `,` or `}`")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<JsonValue, JsonError> {
        self.expect(b'[')?;
        let mut items = Vec::new();
        self.ws();
        if self.peek() == Some(b']') {
            self.bump();
            return Ok(JsonValue::Array(items));
        }
        loop {
            self.ws();
            items.push(self.value(depth + 1)?);
            self.ws();
            match self.bump() {
                Some(b',') => {}
                Some(b']') => return Ok(JsonValue::Array(items)),
                _ => return Err(self.err("expected `,` or `]`")),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let mut v = 0u32;
        for _ in 0..4 {
            let d = self
                .bump()
                .and_then(|b| char::from(b).to_digit(16))
                .ok_or_else(|| self.err("invalid \\u escape"))?;
            v = v * 16 + d;
        }
        Ok(v)
    }

    fn string(&mut self) -> Result<String, JsonError> {
        self.expect(b'"')?;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let b = self.bump().ok_or_else(|| self.err("unterminated string"))?;
            match b {
                b'"' => break,
                b'\\' => {
                    let e = self.bump().ok_or_else(|| self.err("unterminated string"))?;
                    let c = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hi = self.hex4()?;
                            let code = if (0xD800..0xDC00).contains(&hi) {
                                if self.bump() != Some(b'\\') || self.bump() != Some(b'u') {
                                    return Err(self.err("unpaired surrogate in \\u escape"));
                                }
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(self.err("unpaired surrogate in \\u escape"));
                                }
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else {
                                hi
                            };
                            char::from_u32(code).ok_or_else(|| self.err("invalid \\u escape"))?
                        }
                        _ => return Err(self.err("invalid escape in string")),
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                0x00..=0x1f => return Err(self.err("control character in string")),
                _ => out.push(b),
            }
        }
        String::from_utf8(out).map_err(|_| self.err("string is not UTF-8"))
    }

    fn number(&mut self) -> Result<String, JsonError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.bump();
        }
        match self.peek() {
            Some(b'0') => {
                self.bump();
            }
            Some(b'1'..=b'9') => {
                while matches!(self.peek(), Some(b'0'..=b'9')) {
                    self.bump();
                }
            }
            _ => return Err(self.err("invalid number")),
        }
        if self.peek() == Some(b'.') {
            self.bump();
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.err("invalid number"));
            }
            while matches!(self.peek(), Some(b'0'..=b'9')) {
                self.bump();
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.bump();
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.bump();
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.err("invalid number"));
            }
            while matches!(self.peek(), Some(b'0'..=b'9')) {
                self.bump();
            }
        }
        Ok(String::from_utf8_lossy(&self.bytes[start..self.pos]).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_lines_and_order() {
        let doc =
            parse("{\n  \"a\": 1,\n  \"b\": [true, null],\n  \"a\": \"x\\u00e9\"\n}").unwrap();
        let members = doc.members();
        assert_eq!(members.len(), 3);
        assert_eq!(members[0].1.line, 2);
        assert_eq!(members[1].1.line, 3);
        assert_eq!(members[2].1.as_str(), Some("xé"));
    }

    #[test]
    fn rejects_bad_documents_with_a_line() {
        for (doc, line) in [
            ("{\n\"a\": }", 2),
            ("[1,\n2,\n]", 3),
            ("\"abc", 1),
            ("01", 1),
        ] {
            let err = parse(doc).unwrap_err();
            assert_eq!(err.line, line, "{doc}");
        }
        assert!(parse(&"[".repeat(10_000)).is_err());
    }
}
