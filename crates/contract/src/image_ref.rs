//! Image reference syntax (spec: Security Model, "The source image is the trust boundary": CAPTF
//! checks only that `spec.source.image` is a syntactically valid image reference; it does not
//! police which registry or repository it names). The webhook validates with it; the manager
//! splits a reference into repository and digest with it when it pins an image.
//!
//! The grammar is the OCI distribution one: `[host[:port]/]path[:tag][@algorithm:hex]`. A
//! reference without a tag or a digest is syntactically valid (it means the implicit `latest`);
//! [`ImageReference::names_version`] tells it apart, so the webhook can warn about it rather than
//! deny it. Path components are lowercase alphanumerics joined by `.`, `_`, `__` or
//! runs of `-`; the repository name is at most 255 characters; a tag is 1 to 128 word characters,
//! dots and dashes, not starting with a dot or dash; a digest of a registered algorithm has that
//! algorithm's exact length of lowercase hex (`sha256`: 64, `sha384`: 96, `sha512`: 128).

use std::fmt;

/// Longest repository name (host and path).
pub const MAX_NAME_LENGTH: usize = 255;
/// Longest tag.
pub const MAX_TAG_LENGTH: usize = 128;

/// Why a string is not a valid image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageError {
    /// The reference is empty.
    Empty,
    /// More than one `@`.
    MultipleAt,
    /// The repository name is longer than [`MAX_NAME_LENGTH`].
    NameTooLong(usize),
    /// The registry host (and port) is malformed.
    BadHost(String),
    /// A repository path component is malformed (empty, uppercase, bad separators).
    BadPathComponent(String),
    /// The tag is malformed.
    BadTag(String),
    /// The digest is malformed.
    BadDigest(String),
}

impl fmt::Display for ImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("it is empty"),
            Self::MultipleAt => f.write_str("it contains more than one @"),
            Self::NameTooLong(n) => write!(
                f,
                "the repository name is {n} characters long; at most {MAX_NAME_LENGTH} are allowed"
            ),
            Self::BadHost(h) => write!(
                f,
                "the registry {h:?} is not a valid host[:port] (letters, digits, dashes and dots, or a bracketed IPv6 address, then an optional numeric port)"
            ),
            Self::BadPathComponent(c) => write!(
                f,
                "the repository path component {c:?} must be lowercase letters and digits, joined by '.', '_', '__' or dashes"
            ),
            Self::BadTag(t) => write!(
                f,
                "the tag {t:?} must be 1 to {MAX_TAG_LENGTH} letters, digits, '_', '.' or '-', not starting with '.' or '-'"
            ),
            Self::BadDigest(d) => write!(
                f,
                "the digest {d:?} must be algorithm:hex (sha256 takes 64, sha384 96 and sha512 128 lowercase hex digits; any other algorithm at least 32 hex digits)"
            ),
        }
    }
}

/// The parts of a valid image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageReference<'a> {
    /// The registry host and port, when the reference names one.
    pub host: Option<&'a str>,
    /// The repository path below the host.
    pub path: &'a str,
    /// The tag, when there is one.
    pub tag: Option<&'a str>,
    /// The digest (`algorithm:hex`), when there is one.
    pub digest: Option<&'a str>,
}

impl ImageReference<'_> {
    /// Whether the reference names a tag or a digest; without either, a pull takes whatever the
    /// repository's `latest` tag points at when it runs.
    pub fn names_version(&self) -> bool {
        self.tag.is_some() || self.digest.is_some()
    }
}

/// Whether a registry host (`host[:port]`, `[v6]:port`) is loopback: `localhost` (or a
/// `*.localhost` name), `127.0.0.1` or `::1`. Such a registry is spoken to over plain HTTP, as
/// crane and the container runtimes do by default.
pub fn is_loopback_registry(registry: &str) -> bool {
    let host = registry
        .strip_prefix('[')
        .and_then(|r| r.split(']').next())
        .unwrap_or_else(|| registry.split(':').next().unwrap_or(registry));
    matches!(host, "localhost" | "127.0.0.1" | "::1") || host.ends_with(".localhost")
}

/// Parses an image reference; a tag and a digest are both optional.
pub fn parse(reference: &str) -> Result<ImageReference<'_>, ImageError> {
    if reference.is_empty() {
        return Err(ImageError::Empty);
    }
    let (name_and_tag, digest) = match reference.split_once('@') {
        Some((_, rest)) if rest.contains('@') => return Err(ImageError::MultipleAt),
        Some((before, digest)) => (before, Some(digest)),
        None => (reference, None),
    };
    // A tag follows the last ':' that comes after the last '/' (a ':' before it is a port).
    let last_slash = name_and_tag.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match name_and_tag[last_slash..].rfind(':') {
        Some(i) => (
            &name_and_tag[..last_slash + i],
            Some(&name_and_tag[last_slash + i + 1..]),
        ),
        None => (name_and_tag, None),
    };
    if name.is_empty() {
        return Err(ImageError::BadPathComponent(String::new()));
    }
    if name.len() > MAX_NAME_LENGTH {
        return Err(ImageError::NameTooLong(name.len()));
    }
    let (host, path) = split_host(name);
    if let Some(host) = host {
        check_host(host)?;
    }
    for component in path.split('/') {
        if !is_path_component(component) {
            return Err(ImageError::BadPathComponent(component.to_owned()));
        }
    }
    if let Some(tag) = tag
        && !is_tag(tag)
    {
        return Err(ImageError::BadTag(tag.to_owned()));
    }
    if let Some(digest) = digest
        && !is_digest(digest)
    {
        return Err(ImageError::BadDigest(digest.to_owned()));
    }
    Ok(ImageReference {
        host,
        path,
        tag,
        digest,
    })
}

/// The first component is a registry host when more components follow and it looks like one:
/// it has a dot or a port, is `localhost`, or has an uppercase letter (never valid in a path).
fn split_host(name: &str) -> (Option<&str>, &str) {
    match name.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first.bytes().any(|b| b.is_ascii_uppercase()) =>
        {
            (Some(first), rest)
        }
        _ => (None, name),
    }
}

fn check_host(host_and_port: &str) -> Result<(), ImageError> {
    let bad = || ImageError::BadHost(host_and_port.to_owned());
    let (host, port) = if let Some(rest) = host_and_port.strip_prefix('[') {
        let (v6, after) = rest.split_once(']').ok_or_else(bad)?;
        if v6.is_empty()
            || !v6
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        {
            return Err(bad());
        }
        match after {
            "" => return Ok(()),
            _ => (None, Some(after.strip_prefix(':').ok_or_else(bad)?)),
        }
    } else {
        match host_and_port.split_once(':') {
            Some((h, p)) => (Some(h), Some(p)),
            None => (Some(host_and_port), None),
        }
    };
    if let Some(port) = port
        && (port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(bad());
    }
    if let Some(host) = host
        && !host.split('.').all(is_domain_component)
    {
        return Err(bad());
    }
    Ok(())
}

fn is_domain_component(c: &str) -> bool {
    let bytes = c.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
        }
        _ => false,
    }
}

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`
fn is_path_component(c: &str) -> bool {
    let lower_alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = c.as_bytes();
    let mut i = 0;
    let mut expect_alnum = true;
    while i < bytes.len() {
        if expect_alnum {
            let start = i;
            while i < bytes.len() && lower_alnum(bytes[i]) {
                i += 1;
            }
            if i == start {
                return false;
            }
            expect_alnum = false;
        } else {
            let sep_len = match bytes[i] {
                b'_' if bytes.get(i + 1) == Some(&b'_') => 2,
                b'.' | b'_' => 1,
                b'-' => bytes[i..].iter().take_while(|b| **b == b'-').count(),
                _ => return false,
            };
            i += sep_len;
            expect_alnum = true;
        }
    }
    !bytes.is_empty() && !expect_alnum
}

/// `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`
fn is_tag(tag: &str) -> bool {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let bytes = tag.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_TAG_LENGTH
        && word(bytes[0])
        && bytes.iter().all(|b| word(*b) || *b == b'.' || *b == b'-')
}

/// `algorithm:hex`, the algorithm `[A-Za-z][A-Za-z0-9]*([+._-][A-Za-z][A-Za-z0-9]*)*`.
fn is_digest(digest: &str) -> bool {
    let Some((algorithm, hex)) = digest.split_once(':') else {
        return false;
    };
    let algorithm_ok = algorithm.split(['+', '.', '_', '-']).all(|part| {
        let bytes = part.as_bytes();
        bytes.first().is_some_and(u8::is_ascii_alphabetic)
            && bytes.iter().all(u8::is_ascii_alphanumeric)
    });
    if !algorithm_ok {
        return false;
    }
    let lower_hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    match algorithm {
        "sha256" => hex.len() == 64 && lower_hex(hex),
        "sha384" => hex.len() == 96 && lower_hex(hex),
        "sha512" => hex.len() == 128 && lower_hex(hex),
        _ => hex.len() >= 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn accepts_tags_digests_hosts_and_ports() {
        for ok in [
            "ghcr.io/example/aws-machine:v1.4.0".to_owned(),
            "example.invalid/captf/set-by-clusterclass:unset".to_owned(),
            "localhost:5000/noop/cluster:dev".to_owned(),
            "127.0.0.1:5000/a/b:c".to_owned(),
            "[::1]:5000/a:b".to_owned(),
            "busybox:1.36".to_owned(),
            "my_repo/with__double-and---dashes:Tag_1.2-3".to_owned(),
            format!("ghcr.io/example/m@{SHA}"),
            format!("ghcr.io/example/m:v1@{SHA}"),
            "Registry.Example.COM/a/b:c".to_owned(),
        ] {
            assert!(parse(&ok).is_ok(), "{ok}: {:?}", parse(&ok));
        }
    }

    #[test]
    fn a_reference_without_tag_or_digest_is_valid_syntax() {
        let r = parse("ghcr.io/a/b").unwrap();
        assert_eq!(
            (r.host, r.path, r.tag, r.digest),
            (Some("ghcr.io"), "a/b", None, None)
        );
        assert!(!r.names_version());
        assert!(parse("ghcr.io/a/b:v1").unwrap().names_version());
        assert!(parse(&format!("a@{SHA}")).unwrap().names_version());
        assert!(parse("localhost:5000/a").is_ok_and(|r| !r.names_version()));
    }

    #[test]
    fn loopback_registries() {
        for host in [
            "127.0.0.1:5000",
            "localhost",
            "[::1]:80",
            "reg.localhost:80",
        ] {
            assert!(is_loopback_registry(host), "{host}");
        }
        for host in [
            "registry.example:5000",
            "10.0.0.1",
            "localhost.example",
            "[::2]:80",
        ] {
            assert!(!is_loopback_registry(host), "{host}");
        }
    }

    #[test]
    fn splits_the_parts() {
        let r = parse("localhost:5000/noop/cluster:dev").unwrap();
        assert_eq!(r.host, Some("localhost:5000"));
        assert_eq!(r.path, "noop/cluster");
        assert_eq!(r.tag, Some("dev"));
        assert_eq!(r.digest, None);
    }

    #[test]
    fn rejects_malformed_references_with_the_reason() {
        let cases: &[(&str, ImageError)] = &[
            ("", ImageError::Empty),
            ("ghcr.io/A/b:v1", ImageError::BadPathComponent("A".into())),
            (
                "ghcr.io/a//b:v1",
                ImageError::BadPathComponent(String::new()),
            ),
            ("ghcr.io/a-/b:v1", ImageError::BadPathComponent("a-".into())),
            ("ghcr.io/a/b:", ImageError::BadTag(String::new())),
            ("ghcr.io/a/b:.v1", ImageError::BadTag(".v1".into())),
            ("ghcr.io/a/b:v 1", ImageError::BadTag("v 1".into())),
            (
                "ghcr.io/a/b@sha256:abc",
                ImageError::BadDigest("sha256:abc".into()),
            ),
            ("a@b@c", ImageError::MultipleAt),
            ("gh_cr.io/a:v1", ImageError::BadHost("gh_cr.io".into())),
            ("ghcr.io:x/a:v1", ImageError::BadHost("ghcr.io:x".into())),
            (":v1", ImageError::BadPathComponent(String::new())),
        ];
        for (input, want) in cases {
            assert_eq!(parse(input).as_ref().err(), Some(want), "{input}");
        }
        let long = format!("a/{}:v1", "b".repeat(300));
        assert_eq!(parse(&long), Err(ImageError::NameTooLong(302)));
        let long_tag = format!("a:{}", "b".repeat(129));
        assert!(matches!(parse(&long_tag), Err(ImageError::BadTag(_))));
        let upper_digest = format!("a@{}", SHA.to_uppercase().replace("SHA256", "sha256"));
        assert!(matches!(
            parse(&upper_digest),
            Err(ImageError::BadDigest(_))
        ));
    }
}
