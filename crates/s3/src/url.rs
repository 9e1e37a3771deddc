//! `s3://BUCKET/KEY` and `s3://BUCKET/PREFIX/`: where an object or a tree
//! of them is. A key ending in `/` (or empty) names a prefix, as a path
//! ending in `/` names a directory.

use std::fmt;

/// An `s3://` location: a bucket and a key (or prefix) inside it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct S3Url {
    pub bucket: String,
    pub key: String,
}

/// The scheme that marks a location as an object store's.
pub const SCHEME: &str = "s3://";

/// Whether `s` names an object-store location rather than a path or a
/// host.
pub fn is_s3(s: &str) -> bool {
    s.starts_with(SCHEME)
}

impl S3Url {
    /// Parses `s3://BUCKET[/KEY]`. Bucket names follow S3's rules (3–63
    /// characters of lowercase letters, digits, '.', '-'; dots allowed for
    /// stores that take them); keys are at most 1,024 bytes.
    pub fn parse(s: &str) -> Result<S3Url, String> {
        let rest = s
            .strip_prefix(SCHEME)
            .ok_or_else(|| format!("{s:?} is not an s3:// location"))?;
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-';
        if bucket.len() < 3 || bucket.len() > 63 || !bucket.chars().all(ok) {
            return Err(format!(
                "{s:?}: {bucket:?} is not a bucket name (3 to 63 lowercase letters, digits, '.' or '-'); write s3://BUCKET/KEY"
            ));
        }
        if key.len() > 1024 {
            return Err(format!("{s:?}: an object key is at most 1,024 bytes"));
        }
        if key.split('/').any(|c| c == "." || c == "..") {
            return Err(format!(
                "{s:?}: '.' and '..' are not allowed as parts of a key"
            ));
        }
        if key.contains("//") || key.starts_with('/') {
            return Err(format!("{s:?}: a key has no empty parts ('//')"));
        }
        Ok(S3Url {
            bucket: bucket.to_string(),
            key: key.to_string(),
        })
    }

    /// Whether this names a prefix (a "directory") rather than one key.
    pub fn is_prefix(&self) -> bool {
        self.key.is_empty() || self.key.ends_with('/')
    }

    /// The prefix under which a tree rooted here lies: the key with a
    /// trailing '/', or nothing for the whole bucket.
    pub fn as_prefix(&self) -> String {
        if self.is_prefix() {
            self.key.clone()
        } else {
            format!("{}/", self.key)
        }
    }

    /// The last part of the key, the name an object or prefix gets at a
    /// destination; the bucket's name for the whole bucket.
    pub fn name(&self) -> &str {
        let k = self.key.trim_end_matches('/');
        match k.rsplit_once('/') {
            Some((_, n)) => n,
            None if k.is_empty() => &self.bucket,
            None => k,
        }
    }

    /// The same bucket at another key.
    pub fn at(&self, key: impl Into<String>) -> S3Url {
        S3Url {
            bucket: self.bucket.clone(),
            key: key.into(),
        }
    }
}

impl fmt::Display for S3Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.bucket, self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn forms() {
        let u = S3Url::parse("s3://data/a/b.bin").unwrap();
        assert_eq!((u.bucket.as_str(), u.key.as_str()), ("data", "a/b.bin"));
        assert!(!u.is_prefix());
        assert_eq!(u.name(), "b.bin");
        assert_eq!(u.as_prefix(), "a/b.bin/");
        let p = S3Url::parse("s3://data/a/").unwrap();
        assert!(p.is_prefix());
        assert_eq!(p.name(), "a");
        let b = S3Url::parse("s3://data").unwrap();
        assert!(b.is_prefix() && b.key.is_empty());
        assert_eq!(b.name(), "data");
        assert_eq!(b.to_string(), "s3://data/");
        for bad in [
            "s3://",
            "s3://ab",
            "s3://Upper/x",
            "s3://b_c/x",
            "s3://data//x",
            "s3://data/a/../x",
            "/tmp/x",
        ] {
            assert!(S3Url::parse(bad).is_err(), "{bad}");
        }
        assert!(is_s3("s3://x") && !is_s3("host:/x"));
    }

    proptest! {
        #[test]
        fn parse_never_panics_and_round_trips(s in "s3://[a-z0-9.-]{0,70}(/[a-zA-Z0-9 ._/-]{0,40})?") {
            if let Ok(u) = S3Url::parse(&s) {
                let again = S3Url::parse(&u.to_string()).unwrap();
                prop_assert_eq!(again, u);
            }
        }
    }
}
