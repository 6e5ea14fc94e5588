import CourierCore
import Foundation

/// A network failure of a client command as one line that names the host,
/// the port and what to check, in place of the libraries' own text
/// (`Connection errors: SingleConnectionFailure(...)`, a BoringSSL code).
func connectionProblem(_ error: any Error, host: String, port: Int, ca: String?) -> String {
    let text = String(describing: error)
    let place = "\(host):\(port)"
    if text.contains("untrustedServer") || text.contains("has a certificate that is not trusted") || ConnectionFailure(error) == .untrustedServer {
        return ca == nil
            ? "the server at \(place) has a certificate this command does not trust: use --ca courier-data/pki/ca.pem (the server's CA)"
            : "the server at \(place) has a certificate that \(ca!) did not sign: use the CA of that server's data directory (courier-data/pki/ca.pem)"
    }
    switch ConnectionFailure(error) {
    case .refused: return "cannot connect to \(place) (connection refused): is 'courier serve' running there? check --host and --port"
    case .unresolved: return "cannot resolve \(host): check --host"
    case .timedOut: return "\(place) did not answer in time: check --host and --port, and that nothing between blocks the port"
    case .closedBeforeHandshake:
        return "the server at \(place) refused the connection before its TLS handshake: it is over one of that port's connection limits "
            + "(connections from this address, on the port, or from this address that did not authenticate; connections.* in docs/configuration.md) "
            + "— its log says which. Close connections you hold, or wait a moment and try again"
    case .untrustedServer, .certificateRefused, nil: break
    }
    if text.contains("handshakeFailed") || text.contains("TLS handshake with") || ConnectionFailure(error) == .certificateRefused {
        return "the TLS handshake with \(place) failed: check that --cert and --key are a provider certificate of that server's CA, for this environment"
    }
    return "\(place): \(text)"
}
