//! Whether a request is admitted, and as what (P-21, P-39, P-43): its
//! counts and sizes bounded, what the client's key may do applied (the
//! request refused or narrowed, the root it sees), and its protection
//! held to the server's policy. Decided before anything is opened for the
//! request, from the key's options, the server's settings and the request
//! alone: no socket, so it is tested on its own.

use secure::Protection;
use store::Root;
use wire::{ErrorCode, Request};

use connect::error::TransferError;

use super::access::KeyOptions;
use super::limits::{check_policy, check_request, parse_protection};

/// What the server decides about a request before it prepares anything.
pub(super) struct Policy<'a> {
    /// The served root (files), which a key's `root=` narrows.
    pub served: &'a Root,
    /// Whether the server serves a bucket instead of files.
    pub bucket: bool,
    /// `--require-encryption`.
    pub require_encryption: bool,
}

/// A request as admitted: as the key may make it, the root it sees, and
/// its protection.
pub(super) struct Admitted {
    pub req: Request,
    pub root: Root,
    pub protection: Protection,
    /// A write-only key's pushes only add files (a drop box): none is
    /// placed over one that is there.
    pub adding_only: bool,
}

/// Admits `req` from a key with `access` under `policy`, or says why not
/// (each refusal with its own code).
pub(super) fn admit_request(
    access: &KeyOptions,
    policy: &Policy<'_>,
    req: Request,
) -> Result<Admitted, TransferError> {
    check_request(&req)?;
    if access.root.is_some() && policy.bucket {
        return Err(TransferError::new(
            ErrorCode::Permission,
            "root= confines a key to a directory; this server serves a bucket",
        ));
    }
    let req = access.allow(req)?;
    let root = access.root(policy.served)?;
    let protection = parse_protection(req.protection)?;
    check_policy(protection, policy.require_encryption)?;
    Ok(Admitted {
        req,
        root,
        protection,
        adding_only: access.write_only,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::Op;

    fn request(op: Op) -> Request {
        super::super::limits::tests::request(op, 4, 1 << 20)
    }

    fn opts(s: &str) -> KeyOptions {
        KeyOptions::parse(s).unwrap()
    }

    #[test]
    fn a_request_is_refused_narrowed_or_admitted_without_a_socket() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("projects/alpha")).unwrap();
        std::os::unix::fs::symlink("projects/alpha", dir.path().join("way")).unwrap();
        let served = Root::served(dir.path()).unwrap();
        let policy = Policy {
            served: &served,
            bucket: false,
            require_encryption: true,
        };
        let code = |r: Result<Admitted, TransferError>| r.err().map(|e| e.code);
        // What the key may do: read-only pushes and roots through links
        // refused, a pull's rate narrowed to the key's.
        assert_eq!(
            code(admit_request(
                &opts("read-only"),
                &policy,
                request(Op::Push)
            )),
            Some(ErrorCode::Permission)
        );
        assert_eq!(
            code(admit_request(&opts("root=way"), &policy, request(Op::Pull))),
            Some(ErrorCode::Permission)
        );
        let a = admit_request(
            &opts("root=projects/alpha,rate=8M"),
            &policy,
            request(Op::Pull),
        )
        .ok()
        .unwrap();
        assert_eq!(a.req.rate, 1_000_000);
        assert!(a.root.path().ends_with("projects/alpha"));
        // The server's policy, and a code no version knows.
        let mut clear = request(Op::Pull);
        clear.protection = wire::PROTECT_INTEGRITY_ONLY;
        assert_eq!(
            code(admit_request(&opts(""), &policy, clear)),
            Some(ErrorCode::Policy)
        );
        let mut unknown = request(Op::Pull);
        unknown.protection = 9;
        assert_eq!(
            code(admit_request(&opts(""), &policy, unknown)),
            Some(ErrorCode::Protocol)
        );
        // A key's root on a server of a bucket; a request out of bounds.
        let bucket = Policy {
            bucket: true,
            ..policy
        };
        assert_eq!(
            code(admit_request(&opts("root=x"), &bucket, request(Op::Pull))),
            Some(ErrorCode::Permission)
        );
        let mut none = request(Op::Pull);
        none.paths.clear();
        assert!(admit_request(&opts(""), &bucket, none).is_err());
    }
}
