//! An answer's Azure error as haul's error kinds and messages: the code
//! comes in the `x-ms-error-code` header (the only place a HEAD has it) or
//! the XML body's `<Code>`; the status decides where there is no code.

use http::StatusCode;
use object::http::{Answer, Failure, NoAnswer};
use store::{StoreError, StoreErrorKind};

use crate::credentials::{credentials_hint, ENDPOINT_HINT};

/// The store's code and first line of message for a failed answer.
pub fn code_and_message(a: &Answer) -> (Option<String>, Option<String>) {
    let (body_code, message) = crate::xml::error(&String::from_utf8_lossy(&a.body));
    let code = a
        .header("x-ms-error-code")
        .map(str::to_string)
        .or(body_code);
    let message = message.and_then(|m| m.lines().next().map(str::to_string));
    (code, message)
}

/// The kind of failure an Azure code (or, without one, a status) names.
pub fn kind(status: StatusCode, code: Option<&str>, message: Option<&str>) -> StoreErrorKind {
    // Azurite says AuthorizationFailure where Azure says
    // AuthenticationFailed for a wrong signature; both say this.
    let unauthenticated = message.is_some_and(|m| m.starts_with("Server failed to authenticate"));
    match code {
        Some("ContainerNotFound") => StoreErrorKind::NoBucket,
        Some(
            "AuthenticationFailed"
            | "InvalidAuthenticationInfo"
            | "NoAuthenticationInformation"
            | "AccountIsDisabled"
            | "InsufficientAccountPermissions",
        ) => StoreErrorKind::StoreAuth,
        _ if unauthenticated || status == StatusCode::UNAUTHORIZED => StoreErrorKind::StoreAuth,
        Some("BlobNotFound" | "ResourceNotFound") => StoreErrorKind::NotFound,
        Some("ServerBusy" | "OperationTimedOut") => StoreErrorKind::Throttled,
        _ => object::http::kind_of(status),
    }
}

/// What was being done, to what, where: the words of a failure.
pub struct Context<'a> {
    /// "read", "list", "upload a part of".
    pub what: &'a str,
    /// The location, as the user wrote it.
    pub target: &'a str,
    pub endpoint: &'a str,
    pub account: &'a str,
    pub container: &'a str,
}

impl Context<'_> {
    fn failure<'b>(&'b self, hint: &'b str) -> Failure<'b> {
        Failure {
            what: self.what,
            target: self.target,
            endpoint: self.endpoint,
            credentials_hint: hint,
            endpoint_hint: ENDPOINT_HINT,
        }
    }

    /// The error for answer `a`, which is not a success.
    pub fn answered(&self, a: &Answer) -> StoreError {
        let (code, message) = code_and_message(a);
        let kind = kind(a.status, code.as_deref(), message.as_deref());
        let said = match (code, message) {
            (Some(c), Some(m)) => format!("{c}: {m}"),
            (Some(c), None) => format!("{c}, HTTP {}", a.status.as_u16()),
            (None, Some(m)) => format!("HTTP {}: {m}", a.status.as_u16()),
            (None, None) => String::new(),
        };
        if kind == StoreErrorKind::NoBucket {
            return self.no_container(&said);
        }
        let hint = credentials_hint(self.account);
        self.failure(&hint).answered(kind, a.status, &said)
    }

    /// The error for a missing container, naming it.
    pub fn no_container(&self, said: &str) -> StoreError {
        let Context {
            what,
            target,
            endpoint,
            account,
            container,
        } = self;
        StoreError::new(
            StoreErrorKind::NoBucket,
            format!(
                "there is no container {container:?} in storage account {account} at {endpoint} \
                 (while trying to {what} {target}; {said}): create it \
                 (`az storage container create --account-name {account} --name {container}`), \
                 or check the name"
            ),
        )
    }

    /// The error for a store that was not reached.
    pub fn unreachable(&self, why: &NoAnswer) -> StoreError {
        let hint = credentials_hint(self.account);
        self.failure(&hint).unreachable(why)
    }

    /// The error for an answer that makes no sense.
    pub fn garbled(&self, why: &str) -> StoreError {
        StoreError::new(
            StoreErrorKind::Other,
            format!(
                "the object store at {} gave an answer haul cannot read while trying to {} {}: {why}",
                self.endpoint, self.what, self.target
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http::HeaderMap;

    fn answer(status: u16, code: Option<&str>, body: &str) -> Answer {
        let mut headers = HeaderMap::new();
        if let Some(c) = code {
            headers.insert("x-ms-error-code", c.parse().unwrap());
        }
        Answer {
            status: StatusCode::from_u16(status).unwrap(),
            headers,
            body: Bytes::from(body.to_string()),
        }
    }

    const CX: Context = Context {
        what: "list",
        target: "az://acct1/data/x",
        endpoint: "https://acct1.blob.core.windows.net",
        account: "acct1",
        container: "data",
    };

    #[test]
    fn kinds() {
        use StoreErrorKind::*;
        let cases = [
            (404, Some("ContainerNotFound"), "", NoBucket),
            (404, Some("BlobNotFound"), "", NotFound),
            (404, None, "", NotFound),
            (403, Some("AuthenticationFailed"), "", StoreAuth),
            (
                403,
                None,
                "<Error><Code>AuthorizationFailure</Code><Message>Server failed to authenticate the request.</Message></Error>",
                StoreAuth,
            ),
            (400, Some("InvalidAuthenticationInfo"), "", StoreAuth),
            (401, None, "", StoreAuth),
            (403, Some("AuthorizationPermissionMismatch"), "", Permission),
            (403, None, "", Permission),
            (503, Some("ServerBusy"), "", Throttled),
            (500, Some("OperationTimedOut"), "", Throttled),
            (429, None, "", Throttled),
            (400, Some("InvalidBlockList"), "", Other),
        ];
        for (status, code, body, want) in cases {
            let e = CX.answered(&answer(status, code, body));
            assert_eq!(e.kind, want, "{status} {code:?} {body}");
        }
    }

    #[test]
    fn messages_say_what_to_do() {
        let e = CX.answered(&answer(404, Some("ContainerNotFound"), ""));
        assert!(
            e.message.contains("\"data\"") && e.message.contains("acct1"),
            "{}",
            e.message
        );
        assert!(
            e.message.contains("az storage container create"),
            "{}",
            e.message
        );
        let e = CX.answered(&answer(403, Some("AuthenticationFailed"), ""));
        assert!(e.message.contains("AZURE_STORAGE_KEY"), "{}", e.message);
        let body = "<Error><Code>InvalidBlockList</Code><Message>The block list may not contain more than 50,000 blocks.\nRequestId:x</Message></Error>";
        let e = CX.answered(&answer(400, None, body));
        assert!(
            e.message.contains("InvalidBlockList: The block list")
                && !e.message.contains("RequestId"),
            "{}",
            e.message
        );
    }
}
