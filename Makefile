# `make test` is the project's one test command (README, CI).
GO ?= go

.PHONY: test bench redis browser vet torture

# REDSEM_BROWSER_REQUIRED: the dashboard's browser tests fail, rather than
# skip, without chromium.
test: redis browser
	$(GO) vet ./...
	REDSEM_BROWSER_REQUIRED=1 $(GO) test -race -count=1 -timeout 15m ./...

# redis-server is the only thing the tests need beyond Go: install it when
# it is missing and we can (root on Debian/Ubuntu).
redis:
	@command -v redis-server >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools; \
	  else \
	    echo "redis-server is missing: install it (e.g. apt-get install -y redis-server)" >&2; exit 1; \
	  fi; }

# The dashboard's tests drive a headless chromium (Debian's package):
# install it like redis-server.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	  else \
	    echo "chromium is missing: install it (e.g. apt-get install -y chromium)" >&2; exit 1; \
	  fi; }

bench: redis
	$(GO) test -run '^$$' -bench . -benchtime 2000x ./limiter/ ./asynqmw/
	cd bench && $(GO) run .

# The torture suite (internal/torture) at full size: 6 processes x 8
# goroutines per scenario, each fault three times, one scenario at a time,
# and the table of every scenario (-v). `make test` runs it small.
torture: redis
	$(GO) test -race -count=1 -timeout 30m -parallel 1 -v -run 'TestTorture|TestChecker|TestBroken' ./internal/torture/ -torture.long
