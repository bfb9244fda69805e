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
// AcquireTimeout, then is answered 429 Too Many Requests (or the
// configured BusyStatus) with a Retry-After header from
// limiter.BusyError's RetryIn.
// The handler runs under the lease (limiter.Lease.Run, the one way work
// runs under a lease in this module): limiter.LeaseFrom(r.Context())
// gives the lease, the request's context is cancelled with cause
// limiter.ErrLeaseLost if it is lost, and the permits are released when
// the handler returns or panics (the panic goes on after the release).
//
// # Transport
//
// RoundTrip waits for a permit (the request's context and AcquireTimeout
// bound the wait) and holds it until the response body is read to the end or
// closed, not merely until RoundTrip returns, so a streamed response
// counts for as long as it streams. It releases exactly once, also when
// the request fails. A lost lease cuts the request off: RoundTrip, or
// the next Read of the body, returns an error matching
// limiter.ErrLeaseLost (see Transport.RoundTrip for why).
//
// # Rates
//
// A config's Rate adds a fleet-wide rate limit (limiter.RateLimit, GCRA:
// one Redis call per request, callers served in order, no polling) beside
// the semaphore's cap, or instead of it (Limit 0). Both always hold. A
// request takes its rate slot first and sleeps until it, then waits for
// its permit, so that no permit idles in the hands of a request that is
// only sleeping; AcquireTimeout bounds both waits together, and a slot
// further off is not taken (the request fails at once, or is answered
// 429 with the wait as Retry-After). A slot once taken counts, also when
// no permit follows: the rate is never exceeded. A permit that comes late
// for its slot (more than limiter.Lateness) is not used with it: the
// request takes an event now when the rate has room, else gives the
// permit back and reserves anew, so that late requests do not bunch. A
// Transport (with a
// Rate, a Limit or both) pauses the name (limiter.Inspector.Pause) when
// the upstream answers 429 or 503 with Retry-After, for as long as it
// asks, at most 5 minutes (PauseOnRetryAfter sets the bound, or turns it
// off): its rate gives no slot and its semaphore no new permit before
// the end, so that no process sends before the upstream said to. That
// holds for the requests whose slots were reserved before the 429 too:
// the pause moves them past its end, in every process, in the order they
// were reserved (limiter.Reservation).
//
// # Semaphores
//
// A semaphore (and rate limit) is named by the config's Name, plus
// ":"+key when a Key picks one per request. Each middleware or transport
// caches the semaphores and rate limits it used recently, so request-derived keys do not grow
// memory without bound: one unused for a minute is dropped, and at most
// 10,000 are cached (past that, a new key's semaphore is used uncached).
// Dropping one costs nothing in Redis and does not touch the cap, which
// lives in Redis. Every gated request still costs an acquire and a
// release round trip, so derive keys from authenticated values (run the
// middleware after authentication), not from anything a client may
// invent.
//
// # Configuration
//
// A ServerConfig or TransportConfig says what is capped (the name, the
// limit and the rate, the key, the wait); Options (LimiterOptions,
// Logger, PauseOnRetryAfter) say how, as for asynqmw and scheduler. Invalid configs and options are
// reported when the middleware or transport is made, as a
// *limiter.ArgumentError naming the field or option. AcquireTimeout is
// the limiter's bound under its name: the config sets it on every
// semaphore and rate limit.
package httplimit
