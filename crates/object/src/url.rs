//! `SCHEME://BUCKET/KEY` and `SCHEME://BUCKET/PREFIX/`: where an object or
//! a tree of them is, in any store. A key ending in `/` (or empty) names a
//! prefix, as a path ending in `/` names a directory. What a bucket may be
//! called is the store's rule ([`ObjectUrl::parse`] takes it); for Azure
//! the "bucket" is `ACCOUNT/CONTAINER`.

use std::fmt;

/// An object store location: a scheme (`s3://`), a bucket and a key (or
/// prefix) inside it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectUrl {
    pub scheme: &'static str,
    pub bucket: String,
    pub key: String,
}

/// Whether `s` is written as a location of `scheme` (`"s3://"`).
pub fn has_scheme(s: &str, scheme: &str) -> bool {
    s.starts_with(scheme)
}

impl ObjectUrl {
    /// Parses `SCHEME://BUCKET[/KEY]`, where the bucket is the first
    /// `bucket_parts` parts (Azure: account and container) and `bucket`
    /// judges it (None: fine; Some: why not). Keys are at most
    /// `max_key` bytes, with no empty, `.` or `..` parts.
    pub fn parse(
        s: &str,
        scheme: &'static str,
        bucket_parts: usize,
        max_key: usize,
        bucket: impl Fn(&str) -> Option<String>,
    ) -> Result<ObjectUrl, String> {
        let rest = s
            .strip_prefix(scheme)
            .ok_or_else(|| format!("{s:?} is not a {scheme} location"))?;
        let mut cut = 0;
        let mut seen = 0;
        for (i, c) in rest.char_indices() {
            if c == '/' {
                seen += 1;
                if seen == bucket_parts {
                    cut = i;
                    break;
                }
            }
        }
        let (b, key) = if seen == bucket_parts {
            (&rest[..cut], &rest[cut + 1..])
        } else {
            (rest, "")
        };
        if let Some(why) = bucket(b) {
            return Err(format!("{s:?}: {why}"));
        }
        if key.len() > max_key {
            return Err(format!("{s:?}: an object key is at most {max_key} bytes"));
        }
        if key.split('/').any(|c| c == "." || c == "..") {
            return Err(format!(
                "{s:?}: '.' and '..' are not allowed as parts of a key"
            ));
        }
        if key.contains("//") || key.starts_with('/') {
            return Err(format!("{s:?}: a key has no empty parts ('//')"));
        }
        Ok(ObjectUrl {
            scheme,
            bucket: b.to_string(),
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
    /// destination; the bucket's own name for the whole bucket.
    pub fn name(&self) -> &str {
        let k = self.key.trim_end_matches('/');
        match k.rsplit_once('/') {
            Some((_, n)) => n,
            None if k.is_empty() => self.bucket.rsplit('/').next().unwrap_or(&self.bucket),
            None => k,
        }
    }

    /// The same bucket at another key.
    pub fn at(&self, key: impl Into<String>) -> ObjectUrl {
        ObjectUrl {
            scheme: self.scheme,
            bucket: self.bucket.clone(),
            key: key.into(),
        }
    }
}

impl fmt::Display for ObjectUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}/{}", self.scheme, self.bucket, self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_bucket(b: &str) -> Option<String> {
        b.is_empty().then(|| "no bucket".to_string())
    }

    #[test]
    fn forms() {
        let p = |s| ObjectUrl::parse(s, "x://", 1, 1024, any_bucket);
        let u = p("x://data/a/b.bin").unwrap();
        assert_eq!((u.bucket.as_str(), u.key.as_str()), ("data", "a/b.bin"));
        assert!(!u.is_prefix());
        assert_eq!(u.name(), "b.bin");
        assert_eq!(u.as_prefix(), "a/b.bin/");
        let d = p("x://data/a/").unwrap();
        assert!(d.is_prefix() && d.name() == "a");
        let b = p("x://data").unwrap();
        assert!(b.is_prefix() && b.key.is_empty() && b.name() == "data");
        assert_eq!(b.to_string(), "x://data/");
        for bad in ["x://", "x://d//x", "x://d/a/../x", "/tmp/x", "x:///k"] {
            assert!(p(bad).is_err(), "{bad}");
        }
        let az = ObjectUrl::parse("az://acct/cont/a/b", "az://", 2, 1024, any_bucket).unwrap();
        assert_eq!((az.bucket.as_str(), az.key.as_str()), ("acct/cont", "a/b"));
        let whole = ObjectUrl::parse("az://acct/cont", "az://", 2, 1024, any_bucket).unwrap();
        assert_eq!((whole.bucket.as_str(), whole.name()), ("acct/cont", "cont"));
    }

    proptest! {
        #[test]
        fn parse_never_panics_and_round_trips(s in "x://[a-z0-9.-]{0,20}(/[a-zA-Z0-9 ._/-]{0,40})?", parts in 1usize..3) {
            // A bucket of `parts` non-empty parts, as each store's rule
            // asks.
            let whole = |b: &str| {
                (b.split('/').count() != parts || b.split('/').any(str::is_empty))
                    .then(|| "not a bucket".to_string())
            };
            if let Ok(u) = ObjectUrl::parse(&s, "x://", parts, 1024, whole) {
                let again = ObjectUrl::parse(&u.to_string(), "x://", parts, 1024, whole).unwrap();
                prop_assert_eq!(again, u);
            }
        }
    }
}
