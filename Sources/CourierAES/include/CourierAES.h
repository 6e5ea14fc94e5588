#ifndef COURIER_AES_H
#define COURIER_AES_H

#include <stdint.h>

/// An expanded AES key: BoringSSL's AES_KEY (aes.h), whose layout is part
/// of its API ("EVP requires that the size be known").
typedef struct {
    uint32_t rd_key[4 * (14 + 1)];
    unsigned rounds;
} courier_aes_key;

/// Expands a 128-, 192- or 256-bit key (`bits`) once; 0 on success.
int courier_aes_expand(const uint8_t *key, unsigned bits, courier_aes_key *expanded);

/// Enciphers one 16-byte block with an expanded key; `in` and `out` may be
/// the same.
void courier_aes_encrypt_block(const uint8_t *in, uint8_t *out, const courier_aes_key *expanded);

#endif
