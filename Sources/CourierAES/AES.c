#include "CourierAES.h"

// swift-crypto links BoringSSL into every program that uses it, its symbols
// prefixed with CCryptoBoringSSL_, but does not export its headers; its
// AES.permute expands the key again on every block. The two functions
// needed to keep an expanded key are declared here.
int CCryptoBoringSSL_AES_set_encrypt_key(const uint8_t *key, unsigned bits, courier_aes_key *aeskey);
void CCryptoBoringSSL_AES_encrypt(const uint8_t *in, uint8_t *out, const courier_aes_key *key);

int courier_aes_expand(const uint8_t *key, unsigned bits, courier_aes_key *expanded) {
    return CCryptoBoringSSL_AES_set_encrypt_key(key, bits, expanded);
}

void courier_aes_encrypt_block(const uint8_t *in, uint8_t *out, const courier_aes_key *expanded) {
    CCryptoBoringSSL_AES_encrypt(in, out, expanded);
}
