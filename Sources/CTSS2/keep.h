// What tokend keeps of a TPM between signatures, so that a proof costs the
// chip one TPM2_Sign instead of CreatePrimary, Load, Sign and two flushes
// (100-200 ms on a discrete chip). Used on the TPM's one thread only.
//
// Through a resource manager (/dev/tpmrm0, tpm2-abrmd) every connection has
// objects of its own, swapped out while others use the chip and flushed when
// the connection closes, even if tokend dies: the connection, the primary key
// and the last key used stay loaded.
// Without one (/dev/tpm0, swtpm, the simulator) the TPM serves one connection
// at a time and objects outlive their connection, taking the chip's few
// object slots from every other user: nothing stays open or loaded. What is
// kept is the key's saved context (TPM2_ContextSave: wrapped by the TPM,
// useless elsewhere), so a proof is ContextLoad, Sign and FlushContext.
//
// A kept handle or context the TPM no longer knows (a TPM restart, another
// user flushing every transient object) costs one failed command: the key is
// then loaded afresh under a primary made afresh, and what that answers is
// the verdict (tokend_tpm_load_refused says which answers mean the key is not
// this TPM's).
#ifndef TOKEND_CTSS2_KEEP_H
#define TOKEND_CTSS2_KEEP_H

#include "shim.h"

typedef struct {
    char tcti[512];
    int managed;  // through a resource manager: objects may stay loaded
    tokend_tpm tpm;
    int open;
    ESYS_TR primary;  // managed only: kept loaded
    int primary_noda;
    ESYS_TR key;  // managed only: the last key used, loaded
    TPMS_CONTEXT *saved;  // not managed: the last key's saved context (Esys_Free'd)
    uint8_t blob[TOKEND_TPM_BLOB_MAX];  // the key `key` and `saved` are
    size_t blob_size;
} tokend_tpm_keeper;

static inline void tokend_keeper_init(tokend_tpm_keeper *k) {
    memset(k, 0, sizeof *k);
    k->primary = ESYS_TR_NONE;
    k->key = ESYS_TR_NONE;
}

/// Whether `rc` comes from below the TPM (the TCTI, the ESAPI's own state):
/// the connection is no longer trusted and is closed without another command.
static inline int tokend_keeper_broken(TSS2_RC rc) {
    return rc != TSS2_RC_SUCCESS && (rc & 0xFF0000) != 0;
}

/// Whether a command that failed with `rc` is worth trying again afresh (the
/// primary made again, the key loaded again): not when the connection broke
/// or the TPM said "not now" (a warning), except for a warning that a handle
/// refers to nothing loaded, which is what a lost kept handle looks like.
static inline int tokend_keeper_retry_afresh(TSS2_RC rc) {
    if (rc == TSS2_RC_SUCCESS || tokend_keeper_broken(rc)) return 0;
    if ((rc & TPM2_RC_FMT1) == 0 && (rc & 0xF00) == TPM2_RC_WARN) {
        TSS2_RC code = rc & 0x9FF;
        return code >= TPM2_RC_REFERENCE_H0 && code <= TPM2_RC_REFERENCE_S6;
    }
    return 1;
}

/// The TPM's answers to TPM2_Load that mean the blob was not wrapped by this
/// TPM's owner hierarchy (the state copied to another machine, or the TPM
/// cleared): its integrity check or binding fails. Anything else at Load (a
/// handle, a size, the TPM's failure mode, a warning) says nothing of whose
/// key it is.
static inline int tokend_tpm_load_refused(TSS2_RC rc) {
    if ((rc & 0xFF0000) != 0 || (rc & TPM2_RC_FMT1) == 0) return 0;
    TSS2_RC code = rc & (TPM2_RC_FMT1 | 0x3F);
    return code == TPM2_RC_INTEGRITY || code == TPM2_RC_BINDING;
}

/// Drops what is kept: flushed first when the connection still serves (`flush`).
static inline void tokend_keeper_drop(tokend_tpm_keeper *k, int flush) {
    if (k->open) {
        if (flush && k->key != ESYS_TR_NONE) tokend_tss2()->FlushContext(k->tpm.esys, k->key);
        if (flush && k->primary != ESYS_TR_NONE) tokend_tss2()->FlushContext(k->tpm.esys, k->primary);
        tokend_tpm_close(&k->tpm);
    }
    k->open = 0;
    k->key = ESYS_TR_NONE;
    k->primary = ESYS_TR_NONE;
}

static inline void tokend_keeper_forget_key(tokend_tpm_keeper *k) {
    if (k->open && k->key != ESYS_TR_NONE) tokend_tss2()->FlushContext(k->tpm.esys, k->key);
    k->key = ESYS_TR_NONE;
    if (k->saved) tokend_tss2()->Free(k->saved);
    k->saved = NULL;
    k->blob_size = 0;
}

/// TPM2_Sign of a SHA-256 digest with a loaded key: r || s.
static inline TSS2_RC tokend_tpm_sign_loaded(ESYS_CONTEXT *esys, ESYS_TR key, const uint8_t digest[32],
                                             uint8_t signature[64]) {
    TPM2B_DIGEST hash;
    TPMT_SIG_SCHEME scheme;
    TPMT_TK_HASHCHECK ticket;
    TPMT_SIGNATURE *made = NULL;
    memset(&scheme, 0, sizeof scheme);
    memset(&ticket, 0, sizeof ticket);
    hash.size = 32;
    memcpy(hash.buffer, digest, 32);
    scheme.scheme = TPM2_ALG_ECDSA;
    scheme.details.ecdsa.hashAlg = TPM2_ALG_SHA256;
    ticket.tag = TPM2_ST_HASHCHECK;
    ticket.hierarchy = TPM2_RH_NULL;
    TSS2_RC rc = tokend_tss2()->Sign(esys, key, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE, &hash, &scheme, &ticket, &made);
    if (rc == TSS2_RC_SUCCESS
        && (made->sigAlg != TPM2_ALG_ECDSA || !tokend_tpm_p256(&made->signature.ecdsa.signatureR, signature)
            || !tokend_tpm_p256(&made->signature.ecdsa.signatureS, signature + 32))) {
        rc = TSS2_MU_RC_BAD_SIZE;
    }
    tokend_tss2()->Free(made);
    return rc;
}

/// Signs with what is kept of the key, if anything; `*done` is set when its
/// answer stands (success, a broken connection, the TPM busy).
static inline TSS2_RC tokend_keeper_sign_kept(tokend_tpm_keeper *k, const uint8_t digest[32], uint8_t signature[64],
                                              int *step, int *done) {
    TSS2_RC rc = TSS2_RC_SUCCESS;
    *done = 0;
    if (k->key != ESYS_TR_NONE) {
        *step = TOKEND_TPM_SIGN;
        rc = tokend_tpm_sign_loaded(k->tpm.esys, k->key, digest, signature);
        if (!tokend_keeper_retry_afresh(rc)) {
            *done = 1;
            return rc;
        }
        tokend_tss2()->FlushContext(k->tpm.esys, k->key);
        k->key = ESYS_TR_NONE;
    } else if (k->saved) {
        ESYS_TR loaded = ESYS_TR_NONE;
        *step = TOKEND_TPM_RESTORE;
        rc = tokend_tss2()->ContextLoad(k->tpm.esys, k->saved, &loaded);
        if (rc == TSS2_RC_SUCCESS) {
            *step = TOKEND_TPM_SIGN;
            rc = tokend_tpm_sign_loaded(k->tpm.esys, loaded, digest, signature);
            tokend_tss2()->FlushContext(k->tpm.esys, loaded);
        }
        if (!tokend_keeper_retry_afresh(rc)) {
            *done = 1;
            return rc;
        }
        tokend_tss2()->Free(k->saved);
        k->saved = NULL;
    }
    return rc;
}

/// The key loaded afresh (under the kept primary, or one made now) and used
/// to sign; what may be kept of it afterwards is.
static inline TSS2_RC tokend_keeper_sign_afresh(tokend_tpm_keeper *k, const TPM2B_PUBLIC *public_part,
                                                const TPM2B_PRIVATE *private_part, const uint8_t digest[32],
                                                uint8_t signature[64], int *step) {
    // A key with noDA was made under the primary with noDA (both came in together).
    int noda = (public_part->publicArea.objectAttributes & TPMA_OBJECT_NODA) != 0;
    ESYS_CONTEXT *esys = k->tpm.esys;
    if (k->primary != ESYS_TR_NONE && k->primary_noda != noda) {
        tokend_tss2()->FlushContext(esys, k->primary);
        k->primary = ESYS_TR_NONE;
    }
    ESYS_TR primary = k->primary, key = ESYS_TR_NONE;
    k->primary = ESYS_TR_NONE;
    TSS2_RC rc = TSS2_RC_SUCCESS;
    int kept_primary = primary != ESYS_TR_NONE;
    if (!kept_primary) {
        *step = TOKEND_TPM_PRIMARY;
        rc = tokend_tpm_primary(esys, noda, &primary);
        if (rc != TSS2_RC_SUCCESS) return rc;
    }
    *step = TOKEND_TPM_LOAD;
    rc = tokend_tss2()->Load(esys, primary, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE, private_part, public_part, &key);
    if (kept_primary && tokend_keeper_retry_afresh(rc)) {
        // The kept primary may be what the TPM no longer knows: the verdict is a fresh one's.
        tokend_tss2()->FlushContext(esys, primary);
        *step = TOKEND_TPM_PRIMARY;
        rc = tokend_tpm_primary(esys, noda, &primary);
        if (rc != TSS2_RC_SUCCESS) return rc;
        *step = TOKEND_TPM_LOAD;
        rc = tokend_tss2()->Load(esys, primary, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE, private_part, public_part, &key);
    }
    if (k->managed && rc == TSS2_RC_SUCCESS) {
        k->primary = primary;
        k->primary_noda = noda;
    } else if (!tokend_keeper_broken(rc)) {
        tokend_tss2()->FlushContext(esys, primary);
    }
    if (rc != TSS2_RC_SUCCESS) return rc;
    *step = TOKEND_TPM_SIGN;
    rc = tokend_tpm_sign_loaded(esys, key, digest, signature);
    if (k->managed && rc == TSS2_RC_SUCCESS) {
        k->key = key;
        return rc;
    }
    if (rc == TSS2_RC_SUCCESS) {
        TPMS_CONTEXT *saved = NULL;
        if (tokend_tss2()->ContextSave(esys, key, &saved) == TSS2_RC_SUCCESS) k->saved = saved;
    }
    if (!tokend_keeper_broken(rc)) tokend_tss2()->FlushContext(esys, key);
    return rc;
}

/// Signs a SHA-256 digest with a key's blob on the TPM `tcti` names
/// (`managed`: through a resource manager). Writes r || s; `*step` says which
/// step an error comes from.
static inline TSS2_RC tokend_keeper_sign(tokend_tpm_keeper *k, const char *tcti, int managed, const uint8_t *blob,
                                         size_t blob_size, const uint8_t digest[32], uint8_t signature[64],
                                         int *step) {
    TPM2B_PUBLIC public_part;
    TPM2B_PRIVATE private_part;
    size_t offset = 0;
    memset(&public_part, 0, sizeof public_part);
    memset(&private_part, 0, sizeof private_part);
    *step = TOKEND_TPM_CONNECT;
    if (tokend_tss2_missing()) return TSS2_BASE_RC_NOT_IMPLEMENTED | TSS2_ESAPI_RC_LAYER;
    *step = TOKEND_TPM_BLOB;
    if (blob_size > sizeof k->blob) return TSS2_MU_RC_BAD_SIZE;
    TSS2_RC rc = tokend_tss2()->PublicUnmarshal(blob, blob_size, &offset, &public_part);
    if (rc == TSS2_RC_SUCCESS) rc = tokend_tss2()->PrivateUnmarshal(blob, blob_size, &offset, &private_part);
    if (rc != TSS2_RC_SUCCESS) return rc;
    if (strncmp(k->tcti, tcti, sizeof k->tcti) != 0 || k->managed != managed) {
        tokend_keeper_forget_key(k);
        tokend_keeper_drop(k, 1);
        strncpy(k->tcti, tcti, sizeof k->tcti - 1);
        k->managed = managed;
    }
    if (k->blob_size != blob_size || memcmp(k->blob, blob, blob_size) != 0) {
        // Another key: what is kept of the last one goes (one key's objects at most).
        tokend_keeper_forget_key(k);
        memcpy(k->blob, blob, blob_size);
        k->blob_size = blob_size;
    }
    *step = TOKEND_TPM_CONNECT;
    if (!k->open) {
        rc = tokend_tpm_open(tcti, &k->tpm);
        if (rc != TSS2_RC_SUCCESS) return rc;
        k->open = 1;
    }
    int done = 0;
    rc = tokend_keeper_sign_kept(k, digest, signature, step, &done);
    if (!done) rc = tokend_keeper_sign_afresh(k, &public_part, &private_part, digest, signature, step);
    // Without a resource manager nothing stays open; a broken connection is not used again.
    if (!managed || tokend_keeper_broken(rc)) tokend_keeper_drop(k, !tokend_keeper_broken(rc));
    return rc;
}

#endif
