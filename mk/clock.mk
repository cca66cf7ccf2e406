# Times read by day (issue 53): status and doctor name a time of another day
# with its date, so the tests that compare such times run again with the clock
# just before midnight and just before a new year. Every process of the run
# (pytest, the authorization server, tokend, tokenctl) gets the same offset from
# libfaketime, so they agree on what time it is. The monotonic clock moves by the
# same offset (libfaketime 0.9.10 keeping it real fails Python's sleeps, EINVAL).
DEPS_EXTRA += faketime
TEST_EXTRA += test-clock

CLOCK_TESTS := Tests/integration/test_status.py \
	Tests/integration/test_doctor.py::test_a_session_that_needs_a_login_names_the_command
FAKETIME_LIB := /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1

test-clock: $(call needs,venv build)
	@for at in "$$(date -u +%F) 23:30:00" "$$(date -u +%Y)-12-31 23:59:00"; do \
		offset=$$(( $$(date -u -d "$$at" +%s) - $$(date -u +%s) )); \
		echo "test-clock: the clock at $$at UTC (offset $$offset s)"; \
		LD_PRELOAD=$(FAKETIME_LIB) FAKETIME="$$(printf '%+d' $$offset)" \
			TZ=UTC $(PY) -m pytest -q -p no:cacheprovider $(CLOCK_TESTS) || exit 1; \
	done

.PHONY: test-clock
