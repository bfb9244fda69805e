// Package httplimit caps concurrent HTTP requests, and their rate, across
// every process that shares a Redis, with semaphores and rate limits from
// package limiter: incoming requests with a middleware, outgoing ones
// with an http.RoundTripper.
//
//	lc, err := limiter.New(rdb) // one per process; Close it after the server shut down
//	defer lc.Close(ctx)
//
//	// Server: at most 10 requests per API key at once; wait up to 2s, then 429.
//	mw, err := httplimit.Middleware(lc, httplimit.ServerConfig{
//		Name: "api", Limit: 10, AcquireTimeout: 2 * time.Second,
//		Key: func(r *http.Request) (string, bool) { k := r.Header.Get("X-API-Key"); return k, k != "" },
//	})
//	http.ListenAndServe(addr, mw(mux))
//
//	// Client: at most 4 requests in flight per upstream host; a 429 or
//	// 503 with Retry-After pauses the host for every process.
//	rt, err := httplimit.NewTransport(lc, httplimit.TransportConfig{Name: "outbound", Limit: 4})
//	hc := &http.Client{Transport: rt}
//
//	// Client: and at most 100 per minute (bursts of 10).
//	rt, err = httplimit.NewTransport(lc, httplimit.TransportConfig{Name: "api", Limit: 4,
//		Rate: limiter.Rate{Events: 100, Per: time.Minute, Burst: 10}})
//
// # Middleware
//
// A request waits for a permit (woken by a release, not by polling) up to
// AcquireTimeout, then is answered 429 (or BusyStatus) with Retry-After.
// The handler runs under the lease (limiter.Lease.Run):
// limiter.LeaseFrom(r.Context()) gives it, the request's context is
// cancelled with cause limiter.ErrLeaseLost if it is lost, and the
// permits are released when the handler returns or panics.
//
// # Transport
//
// RoundTrip holds its permit until the response body is read to the end
// or closed, so a streamed response counts while it streams, and
// releases exactly once, also when the request fails. A lost lease cuts
// the request off with an error matching limiter.ErrLeaseLost.
//
// # Rates and pauses
//
// A config's Rate adds a fleet-wide rate limit (limiter.RateLimit) beside
// the semaphore's cap, or instead of it (Limit 0); both always hold. A
// request takes its rate slot first, then its permit, within one
// AcquireTimeout. A Transport pauses the name (inspect.Inspector.Pause)
// when the upstream answers 429 or 503 with Retry-After, at most 5
// minutes (PauseOnRetryAfter), for every process.
//
// # Names and configuration
//
// A semaphore and rate limit are named by the config's Name, plus
// ":"+key when a Key picks one per request; derive keys from
// authenticated values, not from anything a client may invent. A config
// says what is capped; Options say how. Bad ones are reported when the
// middleware or transport is made, as a *limiter.ArgumentError.
//
// docs/design.md (httplimit) has the reasoning: why the slot comes first,
// late permits, what a pause moves, the per-key cache, why a lost lease
// cuts a request off.
package httplimit
