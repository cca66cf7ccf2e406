// tpm2-tss ESAPI (Debian: libtss2-dev) and the few steps tokend's TPM key
// store takes, written once here where the TSS structures are plain C.
// Making a key opens its own connection, makes the primary key from the owner
// hierarchy's template, and flushes each object before the next step; what a
// signature keeps between calls is keep.h's.
#ifndef TOKEND_CTSS2_SHIM_H
#define TOKEND_CTSS2_SHIM_H

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <tss2/tss2_esys.h>
#include <tss2/tss2_mu.h>
#include <tss2/tss2_rc.h>
#include <tss2/tss2_tctildr.h>

// The libraries are opened when a TPM is first used, not linked: tokend
// starts (and serves every session without a TPM key) on a host without
// them. The declarations come from libtss2-dev; the code, at run time,
// from libtss2-esys, libtss2-tctildr, libtss2-mu and libtss2-rc.
typedef struct {
    const char *missing;  // the library or symbol that could not be had; NULL when all are there
    TSS2_RC (*TctiLdr_Initialize)(const char *, TSS2_TCTI_CONTEXT **);
    void (*TctiLdr_Finalize)(TSS2_TCTI_CONTEXT **);
    TSS2_RC (*Initialize)(ESYS_CONTEXT **, TSS2_TCTI_CONTEXT *, TSS2_ABI_VERSION *);
    void (*Finalize)(ESYS_CONTEXT **);
    TSS2_RC (*CreatePrimary)(ESYS_CONTEXT *, ESYS_TR, ESYS_TR, ESYS_TR, ESYS_TR, const TPM2B_SENSITIVE_CREATE *,
                             const TPM2B_PUBLIC *, const TPM2B_DATA *, const TPML_PCR_SELECTION *, ESYS_TR *,
                             TPM2B_PUBLIC **, TPM2B_CREATION_DATA **, TPM2B_DIGEST **, TPMT_TK_CREATION **);
    TSS2_RC (*Create)(ESYS_CONTEXT *, ESYS_TR, ESYS_TR, ESYS_TR, ESYS_TR, const TPM2B_SENSITIVE_CREATE *,
                      const TPM2B_PUBLIC *, const TPM2B_DATA *, const TPML_PCR_SELECTION *, TPM2B_PRIVATE **,
                      TPM2B_PUBLIC **, TPM2B_CREATION_DATA **, TPM2B_DIGEST **, TPMT_TK_CREATION **);
    TSS2_RC (*Load)(ESYS_CONTEXT *, ESYS_TR, ESYS_TR, ESYS_TR, ESYS_TR, const TPM2B_PRIVATE *, const TPM2B_PUBLIC *,
                    ESYS_TR *);
    TSS2_RC (*Sign)(ESYS_CONTEXT *, ESYS_TR, ESYS_TR, ESYS_TR, ESYS_TR, const TPM2B_DIGEST *, const TPMT_SIG_SCHEME *,
                    const TPMT_TK_HASHCHECK *, TPMT_SIGNATURE **);
    TSS2_RC (*FlushContext)(ESYS_CONTEXT *, ESYS_TR);
    TSS2_RC (*ContextSave)(ESYS_CONTEXT *, ESYS_TR, TPMS_CONTEXT **);
    TSS2_RC (*ContextLoad)(ESYS_CONTEXT *, const TPMS_CONTEXT *, ESYS_TR *);
    void (*Free)(void *);
    TSS2_RC (*PublicMarshal)(const TPM2B_PUBLIC *, uint8_t *, size_t, size_t *);
    TSS2_RC (*PublicUnmarshal)(const uint8_t *, size_t, size_t *, TPM2B_PUBLIC *);
    TSS2_RC (*PrivateMarshal)(const TPM2B_PRIVATE *, uint8_t *, size_t, size_t *);
    TSS2_RC (*PrivateUnmarshal)(const uint8_t *, size_t, size_t *, TPM2B_PRIVATE *);
    const char *(*Decode)(TSS2_RC);
} tokend_tss2_api;

static inline void *tokend_tss2_symbol(void *library, const char *name, const char **missing) {
    void *symbol = library ? dlsym(library, name) : NULL;
    if (!symbol && !*missing) *missing = name;
    return symbol;
}

static inline void tokend_tss2_open(tokend_tss2_api *api) {
    static const char *names[] = {"libtss2-tctildr.so.0", "libtss2-esys.so.0", "libtss2-mu.so.0", "libtss2-rc.so.0"};
    void *libraries[4];
    api->missing = NULL;
    for (int i = 0; i < 4; i++) {
        libraries[i] = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!libraries[i] && !api->missing) api->missing = names[i];
    }
    const char **missing = &api->missing;
    *(void **)&api->TctiLdr_Initialize = tokend_tss2_symbol(libraries[0], "Tss2_TctiLdr_Initialize", missing);
    *(void **)&api->TctiLdr_Finalize = tokend_tss2_symbol(libraries[0], "Tss2_TctiLdr_Finalize", missing);
    *(void **)&api->Initialize = tokend_tss2_symbol(libraries[1], "Esys_Initialize", missing);
    *(void **)&api->Finalize = tokend_tss2_symbol(libraries[1], "Esys_Finalize", missing);
    *(void **)&api->CreatePrimary = tokend_tss2_symbol(libraries[1], "Esys_CreatePrimary", missing);
    *(void **)&api->Create = tokend_tss2_symbol(libraries[1], "Esys_Create", missing);
    *(void **)&api->Load = tokend_tss2_symbol(libraries[1], "Esys_Load", missing);
    *(void **)&api->Sign = tokend_tss2_symbol(libraries[1], "Esys_Sign", missing);
    *(void **)&api->FlushContext = tokend_tss2_symbol(libraries[1], "Esys_FlushContext", missing);
    *(void **)&api->ContextSave = tokend_tss2_symbol(libraries[1], "Esys_ContextSave", missing);
    *(void **)&api->ContextLoad = tokend_tss2_symbol(libraries[1], "Esys_ContextLoad", missing);
    *(void **)&api->Free = tokend_tss2_symbol(libraries[1], "Esys_Free", missing);
    *(void **)&api->PublicMarshal = tokend_tss2_symbol(libraries[2], "Tss2_MU_TPM2B_PUBLIC_Marshal", missing);
    *(void **)&api->PublicUnmarshal = tokend_tss2_symbol(libraries[2], "Tss2_MU_TPM2B_PUBLIC_Unmarshal", missing);
    *(void **)&api->PrivateMarshal = tokend_tss2_symbol(libraries[2], "Tss2_MU_TPM2B_PRIVATE_Marshal", missing);
    *(void **)&api->PrivateUnmarshal = tokend_tss2_symbol(libraries[2], "Tss2_MU_TPM2B_PRIVATE_Unmarshal", missing);
    *(void **)&api->Decode = tokend_tss2_symbol(libraries[3], "Tss2_RC_Decode", missing);
}

/// The libraries' functions, opened once; `missing` says what is not there.
static inline const tokend_tss2_api *tokend_tss2(void) {
    static tokend_tss2_api api;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static int opened = 0;
    pthread_mutex_lock(&lock);
    if (!opened) {
        tokend_tss2_open(&api);
        opened = 1;
    }
    pthread_mutex_unlock(&lock);
    return &api;
}

/// NULL when the libraries are there; else the one missing.
static inline const char *tokend_tss2_missing(void) { return tokend_tss2()->missing; }

/// The TSS's words for a response code.
static inline const char *tokend_tss2_decode(TSS2_RC rc) {
    const tokend_tss2_api *api = tokend_tss2();
    return api->missing ? "the TSS libraries are missing" : api->Decode(rc);
}

/// Which step failed, for the caller's message.
enum tokend_tpm_step {
    TOKEND_TPM_CONNECT = 1,
    TOKEND_TPM_PRIMARY = 2,
    TOKEND_TPM_CREATE = 3,
    TOKEND_TPM_LOAD = 4,
    TOKEND_TPM_SIGN = 5,
    TOKEND_TPM_BLOB = 6,
    TOKEND_TPM_RESTORE = 7,  // loading a kept context (keep.h)
};

/// The most a key's blob (TPM2B_PUBLIC then TPM2B_PRIVATE, marshalled) takes.
#define TOKEND_TPM_BLOB_MAX (sizeof(TPM2B_PUBLIC) + sizeof(TPM2B_PRIVATE))

typedef struct {
    TSS2_TCTI_CONTEXT *tcti;
    ESYS_CONTEXT *esys;
} tokend_tpm;

static inline TSS2_RC tokend_tpm_open(const char *tcti, tokend_tpm *tpm) {
    tpm->tcti = NULL;
    tpm->esys = NULL;
    if (tokend_tss2_missing()) return TSS2_BASE_RC_NOT_IMPLEMENTED | TSS2_ESAPI_RC_LAYER;
    TSS2_RC rc = tokend_tss2()->TctiLdr_Initialize(tcti, &tpm->tcti);
    if (rc != TSS2_RC_SUCCESS) return rc;
    rc = tokend_tss2()->Initialize(&tpm->esys, tpm->tcti, NULL);
    if (rc != TSS2_RC_SUCCESS) tokend_tss2()->TctiLdr_Finalize(&tpm->tcti);
    return rc;
}

static inline void tokend_tpm_close(tokend_tpm *tpm) {
    if (tpm->esys) tokend_tss2()->Finalize(&tpm->esys);
    if (tpm->tcti) tokend_tss2()->TctiLdr_Finalize(&tpm->tcti);
}

/// The owner hierarchy's ECC P-256 storage key, from the template tpm2-tools
/// also uses by default (`tpm2_createprimary -C o -g sha256 -G ecc256:aes128cfb`,
/// with `-a ...|noda` when `noda`):
/// the same TPM makes the same key from it every time; another TPM cannot.
/// With `noda` it is exempt from dictionary-attack lockout (its auth is empty,
/// so there is nothing to guess); the template is part of what the key is made
/// from, so keys made under the older template without it load under that one.
static inline TSS2_RC tokend_tpm_primary(ESYS_CONTEXT *esys, int noda, ESYS_TR *primary) {
    TPM2B_SENSITIVE_CREATE sensitive;
    TPM2B_PUBLIC template;
    TPM2B_DATA outside;
    TPML_PCR_SELECTION pcrs;
    memset(&sensitive, 0, sizeof sensitive);
    memset(&template, 0, sizeof template);
    memset(&outside, 0, sizeof outside);
    memset(&pcrs, 0, sizeof pcrs);
    template.publicArea.type = TPM2_ALG_ECC;
    template.publicArea.nameAlg = TPM2_ALG_SHA256;
    template.publicArea.objectAttributes = TPMA_OBJECT_RESTRICTED | TPMA_OBJECT_DECRYPT | TPMA_OBJECT_FIXEDTPM
        | TPMA_OBJECT_FIXEDPARENT | TPMA_OBJECT_SENSITIVEDATAORIGIN | TPMA_OBJECT_USERWITHAUTH
        | (noda ? TPMA_OBJECT_NODA : 0);
    template.publicArea.parameters.eccDetail.symmetric.algorithm = TPM2_ALG_AES;
    template.publicArea.parameters.eccDetail.symmetric.keyBits.aes = 128;
    template.publicArea.parameters.eccDetail.symmetric.mode.aes = TPM2_ALG_CFB;
    template.publicArea.parameters.eccDetail.scheme.scheme = TPM2_ALG_NULL;
    template.publicArea.parameters.eccDetail.curveID = TPM2_ECC_NIST_P256;
    template.publicArea.parameters.eccDetail.kdf.scheme = TPM2_ALG_NULL;
    return tokend_tss2()->CreatePrimary(esys, ESYS_TR_RH_OWNER, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE, &sensitive,
        &template, &outside, &pcrs, primary, NULL, NULL, NULL, NULL);
}

/// The left-padded 32-byte form of an ECC parameter; 0 when it does not fit.
static inline int tokend_tpm_p256(const TPM2B_ECC_PARAMETER *parameter, uint8_t out[32]) {
    if (parameter->size > 32) return 0;
    memset(out, 0, 32);
    memcpy(out + 32 - parameter->size, parameter->buffer, parameter->size);
    return 1;
}

/// Makes a P-256 signing key under the owner's primary key: fixedTPM,
/// fixedParent, sensitiveDataOrigin (made inside, never leaves), noDA (its
/// auth is empty: a TPM in lockout still signs with it), ECDSA with SHA-256
/// only. Writes its blob (for the state file) and its public point (x || y).
static inline TSS2_RC tokend_tpm_make_key(const char *tcti, uint8_t *blob, size_t *blob_size, uint8_t point[64],
                                          int *step) {
    tokend_tpm tpm;
    ESYS_TR primary = ESYS_TR_NONE;
    TPM2B_PRIVATE *private_part = NULL;
    TPM2B_PUBLIC *public_part = NULL;
    *step = TOKEND_TPM_CONNECT;
    TSS2_RC rc = tokend_tpm_open(tcti, &tpm);
    if (rc != TSS2_RC_SUCCESS) return rc;
    *step = TOKEND_TPM_PRIMARY;
    rc = tokend_tpm_primary(tpm.esys, 1, &primary);
    if (rc == TSS2_RC_SUCCESS) {
        TPM2B_SENSITIVE_CREATE sensitive;
        TPM2B_PUBLIC template;
        TPM2B_DATA outside;
        TPML_PCR_SELECTION pcrs;
        memset(&sensitive, 0, sizeof sensitive);
        memset(&template, 0, sizeof template);
        memset(&outside, 0, sizeof outside);
        memset(&pcrs, 0, sizeof pcrs);
        template.publicArea.type = TPM2_ALG_ECC;
        template.publicArea.nameAlg = TPM2_ALG_SHA256;
        template.publicArea.objectAttributes = TPMA_OBJECT_FIXEDTPM | TPMA_OBJECT_FIXEDPARENT
            | TPMA_OBJECT_SENSITIVEDATAORIGIN | TPMA_OBJECT_USERWITHAUTH | TPMA_OBJECT_SIGN_ENCRYPT | TPMA_OBJECT_NODA;
        template.publicArea.parameters.eccDetail.symmetric.algorithm = TPM2_ALG_NULL;
        template.publicArea.parameters.eccDetail.scheme.scheme = TPM2_ALG_ECDSA;
        template.publicArea.parameters.eccDetail.scheme.details.ecdsa.hashAlg = TPM2_ALG_SHA256;
        template.publicArea.parameters.eccDetail.curveID = TPM2_ECC_NIST_P256;
        template.publicArea.parameters.eccDetail.kdf.scheme = TPM2_ALG_NULL;
        *step = TOKEND_TPM_CREATE;
        rc = tokend_tss2()->Create(tpm.esys, primary, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE, &sensitive, &template,
            &outside, &pcrs, &private_part, &public_part, NULL, NULL, NULL);
        tokend_tss2()->FlushContext(tpm.esys, primary);
    }
    if (rc == TSS2_RC_SUCCESS) {
        size_t offset = 0;
        *step = TOKEND_TPM_BLOB;
        rc = tokend_tss2()->PublicMarshal(public_part, blob, *blob_size, &offset);
        if (rc == TSS2_RC_SUCCESS) rc = tokend_tss2()->PrivateMarshal(private_part, blob, *blob_size, &offset);
        if (rc == TSS2_RC_SUCCESS) {
            *blob_size = offset;
            const TPMS_ECC_POINT *ecc = &public_part->publicArea.unique.ecc;
            if (!tokend_tpm_p256(&ecc->x, point) || !tokend_tpm_p256(&ecc->y, point + 32)) rc = TSS2_MU_RC_BAD_SIZE;
        }
    }
    tokend_tss2()->Free(private_part);
    tokend_tss2()->Free(public_part);
    tokend_tpm_close(&tpm);
    return rc;
}

/// Whether a TPM response code is a warning (TPM2_RC_WARN: lockout, retry,
/// testing, yielded, out of memory...): the TPM is busy now, not refusing the key.
static inline int tokend_tpm_rc_is_warning(TSS2_RC rc) {
    if ((rc & 0xFF0000) != 0) return 0;  // from a TSS layer, not the TPM
    if ((rc & TPM2_RC_FMT1) != 0) return 0;
    return (rc & 0xF00) == TPM2_RC_WARN;
}

/// The public point (x || y) a blob carries, read without the TPM.
static inline TSS2_RC tokend_tpm_blob_point(const uint8_t *blob, size_t blob_size, uint8_t point[64]) {
    TPM2B_PUBLIC public_part;
    size_t offset = 0;
    memset(&public_part, 0, sizeof public_part);
    if (tokend_tss2_missing()) return TSS2_BASE_RC_NOT_IMPLEMENTED | TSS2_ESAPI_RC_LAYER;
    TSS2_RC rc = tokend_tss2()->PublicUnmarshal(blob, blob_size, &offset, &public_part);
    if (rc != TSS2_RC_SUCCESS) return rc;
    if (public_part.publicArea.type != TPM2_ALG_ECC
        || public_part.publicArea.parameters.eccDetail.curveID != TPM2_ECC_NIST_P256) return TSS2_MU_RC_BAD_VALUE;
    const TPMS_ECC_POINT *ecc = &public_part.publicArea.unique.ecc;
    if (!tokend_tpm_p256(&ecc->x, point) || !tokend_tpm_p256(&ecc->y, point + 32)) return TSS2_MU_RC_BAD_SIZE;
    return TSS2_RC_SUCCESS;
}

#endif
