# DPoP (issue 42): tpm2-tss ESAPI for the TPM key store (Sources/CTSS2,
# Sources/TPMKeys), swtpm as the TPM of Tests/integration/test_dpop.py (started
# there in socket mode), tpm2-tools for the test's probes of the key tokend made,
# libfaketime for a provider whose clock is ahead of tokend's.
DEPS_EXTRA += libtss2-dev swtpm swtpm-tools tpm2-tools faketime
BENCH_EXTRA += bench-dpop
.PHONY: bench-dpop

# What DPoP costs: a cached GetToken on a DPoP session against a Bearer one
# (same run), GetProof with a key in the state and in swtpm, then a request
# through tokend-proxy on each kind of session (its section of bench/DPOP.md).
bench-dpop: venv release
	$(PY) bench/dpop_bench.py .build/release bench/DPOP.md
	$(PY) bench/dpop_proxy_bench.py .build/release bench/DPOP.md
