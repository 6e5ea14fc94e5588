/// What a failed connection or TLS handshake was, read from the error's
/// own description: NIO's and BoringSSL's errors name these cases in their
/// text (an errno, an SSL reason), and the clients of every interface —
/// provider, device, the command line — tell their users the same way.
public enum ConnectionFailure: Sendable, Equatable {
    /// Nothing listens at the address.
    case refused
    /// The server's certificate did not verify against the CA given.
    case untrustedServer
    /// The server's TLS alert about this client's certificate: revoked,
    /// unknown (another CA's), expired.
    case certificateRefused
    /// The host name did not resolve.
    case unresolved
    case timedOut
    /// The server closed the connection before the TLS handshake could
    /// finish, without a TLS alert: a listener refuses a connection over
    /// its limits at accept so (docs/security.md).
    case closedBeforeHandshake

    public init?(_ error: any Error) {
        let text = String(describing: error)
        func has(_ parts: String...) -> Bool { parts.contains { text.contains($0) } }
        if has("ALERT_CERTIFICATE_UNKNOWN", "ALERT_CERTIFICATE_REVOKED", "ALERT_BAD_CERTIFICATE", "ALERT_CERTIFICATE_EXPIRED") {
            self = .certificateRefused
        } else if has("CERTIFICATE_VERIFY_FAILED") {
            self = .untrustedServer
        } else if has("connectionRefused", "Connection refused", "ECONNREFUSED", "errno: 111") {
            self = .refused
        } else if has("dnsAAAAError", "dnsAError", "host not found", "Name or service not known") {
            self = .unresolved
        } else if has("timeout", "timedOut", "Timeout") {
            self = .timedOut
        } else if has("refusedBeforeHandshake", "closed the connection before its TLS handshake", "uncleanShutdown", "Connection reset by peer", "errno: 104", "ECONNRESET", "eofDuringHandshake", "EOF during handshake", "unexpected EOF") {
            self = .closedBeforeHandshake
        } else {
            return nil
        }
    }
}
