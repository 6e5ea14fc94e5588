#include "CourierBoringSSL.h"

// swift-nio-ssl links BoringSSL into every program that uses it, its symbols
// prefixed with CNIOBoringSSL_, but does not export its headers: the one
// function needed is declared here. A swift-nio-ssl without it fails to link.
void CNIOBoringSSL_SSL_CTX_set_retain_only_sha256_of_client_certs(void *context, int enabled);

void courier_ssl_ctx_retain_only_peer_hash(void *context) {
    CNIOBoringSSL_SSL_CTX_set_retain_only_sha256_of_client_certs(context, 1);
}
