//! scp-style locations: `[user@]host[:port]:path` is remote, anything else
//! local. As in scp, a colon after a '/' does not make a path remote
//! (`./a:b` is local), and IPv6 hosts go in brackets: `[::1]:7050:/data`.
//! `s3://BUCKET/KEY` (and each scheme of `backends`' registry) is an
//! object store's, reached from this host.

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    Local(String),
    /// `s3://...`, `gs://...`, `az://...`, as written.
    Bucket(String),
    Remote {
        user: Option<String>,
        host: String,
        port: Option<u16>,
        path: String,
    },
}

impl Location {
    pub fn parse(s: &str) -> Location {
        if backends::is_object(s) {
            return Location::Bucket(s.to_string());
        }
        let local = || Location::Local(s.to_string());
        let (user, rest) = match s.split_once('@') {
            Some((u, r)) if !u.contains('/') && !u.contains(':') && !u.is_empty() => {
                (Some(u.to_string()), r)
            }
            _ => (None, s),
        };
        let (host, after) = if let Some(r) = rest.strip_prefix('[') {
            match r.split_once("]:") {
                Some((h, a)) => (h.to_string(), a),
                None => return local(),
            }
        } else {
            match rest.split_once(':') {
                Some((h, a)) if !h.is_empty() && !h.contains('/') => (h.to_string(), a),
                _ => return local(),
            }
        };
        // `host:PORT:path`: digits then a colon.
        let (port, path) = match after.split_once(':') {
            Some((p, path))
                if !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) =>
            {
                match p.parse::<u16>() {
                    Ok(port) => (Some(port), path.to_string()),
                    Err(_) => (None, after.to_string()),
                }
            }
            _ => (None, after.to_string()),
        };
        Location::Remote {
            user,
            host,
            port,
            path,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(user: Option<&str>, host: &str, port: Option<u16>, path: &str) -> Location {
        Location::Remote {
            user: user.map(Into::into),
            host: host.into(),
            port,
            path: path.into(),
        }
    }

    #[test]
    fn scp_forms() {
        assert_eq!(Location::parse("/tmp/a"), Location::Local("/tmp/a".into()));
        assert_eq!(Location::parse("./a:b"), Location::Local("./a:b".into()));
        assert_eq!(Location::parse("-"), Location::Local("-".into()));
        assert_eq!(
            Location::parse("s3://b/k:x"),
            Location::Bucket("s3://b/k:x".into())
        );
        assert_eq!(
            Location::parse("h:/data/x"),
            remote(None, "h", None, "/data/x")
        );
        assert_eq!(Location::parse("h:"), remote(None, "h", None, ""));
        assert_eq!(
            Location::parse("bob@h:7051:x"),
            remote(Some("bob"), "h", Some(7051), "x")
        );
        assert_eq!(
            Location::parse("127.0.0.1:7050:/d/"),
            remote(None, "127.0.0.1", Some(7050), "/d/")
        );
        assert_eq!(
            Location::parse("[::1]:9:/d"),
            remote(None, "::1", Some(9), "/d")
        );
        assert_eq!(
            Location::parse("h:2024:logs"),
            remote(None, "h", Some(2024), "logs")
        );
        assert_eq!(
            Location::parse("h:99999:x"),
            remote(None, "h", None, "99999:x")
        );
    }
}
