use std::error::Error as _;

use rmq_core::acl::AclError;
use rmq_core::wire::EncodeError;

use super::*;

#[test]
fn a_core_failure_keeps_its_type_and_is_the_errors_source() {
    let e = send_error(&SendFailure::Encode(EncodeError::BufferTooSmall));
    assert_eq!(
        e.kind(),
        &SendErrorKind::Request(EncodeError::BufferTooSmall)
    );
    let source = e.source().expect("the core's failure");
    assert_eq!(
        source.to_string(),
        SendFailure::Encode(EncodeError::BufferTooSmall).to_string()
    );
    assert!(!e.is_retryable());
    let e = send_error(&SendFailure::Acl(AclError::KeyTooLong));
    assert_eq!(e.kind(), &SendErrorKind::Signing(AclError::KeyTooLong));
    assert!(e.to_string().starts_with("cannot sign the request"));
    // A failure of the plan: the core's, down to its own source.
    let e = send_error(&SendFailure::NoNameServer);
    assert_eq!(e.kind(), &SendErrorKind::NoNameServer);
    assert!(e.is_retryable());
    assert!(e.source().is_some());
}
