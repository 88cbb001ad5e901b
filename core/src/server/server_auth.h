/* API keys (server_auth.c): the --api-key-file kept as digests, and checks
 * of bearer tokens against them. */
#ifndef LOOM_SERVER_AUTH_H
#define LOOM_SERVER_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include <loom/status.h>

#define SRV_KEY_DIGEST_SIZE 32

/* The SHA-256 digest a key is kept and compared as (nettle's). */
void srv_key_digest(const char *key, size_t len,
                    uint8_t out[SRV_KEY_DIGEST_SIZE]);

/* The keys of an --api-key-file, as SHA-256 digests with their labels. */
typedef struct srv_keyring srv_keyring;

/* Reads PATH: one key a line, optionally `label: key`; blank lines and lines
 * starting with '#' are skipped. Refuses a file readable by group or others,
 * and one without keys. Only digests are kept; the file's text is wiped. */
loom_status srv_keyring_load(const char *path, srv_keyring **out,
                             loom_err *err);
void srv_keyring_free(srv_keyring *k);
int srv_keyring_count(const srv_keyring *k);
/* Checks a presented key against every digest in constant time (the time
 * depends on the number of keys only). Returns the matching key's label, or
 * NULL. The label is owned by the keyring. */
const char *srv_keyring_check(const srv_keyring *k, const char *key,
                              size_t len);
/* The token of an "Authorization: Bearer <token>" value, or NULL. */
const char *srv_bearer_token(const char *header, size_t *len);

#endif
