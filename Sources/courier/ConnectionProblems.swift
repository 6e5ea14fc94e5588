import Foundation

/// A network failure of a client command as one line that names the host,
/// the port and what to check, in place of the libraries' own text
/// (`Connection errors: SingleConnectionFailure(...)`, a BoringSSL code).
/// The libraries' error types are matched by the text they describe
/// themselves with: the command line does not depend on NIO's modules.
func connectionProblem(_ error: any Error, host: String, port: Int, ca: String?) -> String {
    let text = String(describing: error)
    let place = "\(host):\(port)"
    if text.contains("untrustedServer") || text.contains("has a certificate that is not trusted") || text.contains("CERTIFICATE_VERIFY_FAILED") {
        return ca == nil
            ? "the server at \(place) has a certificate this command does not trust: use --ca courier-data/pki/ca.pem (the server's CA)"
            : "the server at \(place) has a certificate that \(ca!) did not sign: use the CA of that server's data directory (courier-data/pki/ca.pem)"
    }
    if text.contains("connectionRefused") || text.contains("Connection refused") || text.contains("ECONNREFUSED") || text.contains("errno: 111") {
        return "cannot connect to \(place) (connection refused): is 'courier serve' running there? check --host and --port"
    }
    if text.contains("dnsAAAAError") || text.contains("dnsAError") || text.contains("host not found") || text.contains("Name or service not known") {
        return "cannot resolve \(host): check --host"
    }
    if text.contains("timeout") || text.contains("timedOut") || text.contains("Timeout") {
        return "\(place) did not answer in time: check --host and --port, and that nothing between blocks the port"
    }
    if text.contains("handshakeFailed") || text.contains("TLS handshake with") {
        return "the TLS handshake with \(place) failed: check that --cert and --key are a provider certificate of that server's CA, for this environment"
    }
    return "\(place): \(text)"
}
