#ifndef COURIER_BORINGSSL_H
#define COURIER_BORINGSSL_H

/// Makes a BoringSSL server context keep only the SHA-256 hash of each
/// client certificate once a handshake is over, not the certificate itself
/// (BoringSSL's SSL_CTX_set_retain_only_sha256_of_client_certs). `context`
/// is the SSL_CTX of a swift-nio-ssl context, before any connection uses it.
void courier_ssl_ctx_retain_only_peer_hash(void *context);

#endif
