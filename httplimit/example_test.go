package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/httplimit"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// At most one request per API key at once, across every server process
// that uses this Redis. A request that finds its key busy is answered
// 429 with Retry-After at once (a negative AcquireTimeout does not wait).
func ExampleMiddleware() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	lc, err := limiter.New(rdb) // one per process
	if err != nil {
		panic(err)
	}
	defer lc.Close(context.Background()) // after the server shut down

	mw, err := httplimit.Middleware(lc, httplimit.ServerConfig{
		Name:           "example:api",
		Limit:          1,
		AcquireTimeout: -1,
		Key: func(r *http.Request) (string, bool) {
			key := r.Header.Get("X-API-Key")
			return key, key != "" // requests without a key are not capped
		},
	})
	if err != nil {
		panic(err) // wraps a *limiter.ArgumentError naming the bad field
	}
	inSlow, finish := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// r.Context() is cancelled (cause limiter.ErrLeaseLost) if the
		// permit is lost; the lease's fencing token is at hand.
		lease, _ := limiter.LeaseFrom(r.Context())
		if r.URL.Path == "/slow" {
			close(inSlow)
			<-finish
		}
		fmt.Fprintf(w, "token > 0: %v", lease.Token() > 0)
	})))
	defer srv.Close()

	call := func(path, apiKey string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header.Set("X-API-Key", apiKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		return resp
	}
	slow := make(chan *http.Response)
	go func() { slow <- call("/slow", "alice") }()
	<-inSlow

	busy := call("/", "alice")
	busy.Body.Close()
	fmt.Println("alice again:", busy.StatusCode, "Retry-After set:", busy.Header.Get("Retry-After") != "")
	bob := call("/", "bob")
	body, _ := io.ReadAll(bob.Body)
	bob.Body.Close()
	fmt.Println("bob:", bob.StatusCode, string(body))

	close(finish)
	first := <-slow
	first.Body.Close()
	fmt.Println("alice's first:", first.StatusCode)
	// Output:
	// alice again: 429 Retry-After set: true
	// bob: 200 token > 0: true
	// alice's first: 200
}

// At most 2 requests in flight per upstream host across every process.
// A response holds its permit until its body is read to the end or
// closed, so a streamed download counts for as long as it streams.
func ExampleNewTransport() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	lc, err := limiter.New(rdb)
	if err != nil {
		panic(err)
	}
	defer lc.Close(context.Background()) // after the last body was closed

	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "pong")
	}))
	defer upstream.Close()

	rt, err := httplimit.NewTransport(lc, httplimit.TransportConfig{
		Name:           "example:outbound",
		Limit:          2,
		AcquireTimeout: 100 * time.Millisecond, // and the request's context
	}, httplimit.LimiterOptions(limiter.MaxHold(time.Minute))) // a hold ends within a minute and a TTL
	if err != nil {
		panic(err)
	}
	hc := &http.Client{Transport: rt}
	defer hc.CloseIdleConnections()

	a, _ := hc.Get(upstream.URL) // holds a permit until its body is done
	b, _ := hc.Get(upstream.URL)
	_, err = hc.Get(upstream.URL) // a third waits up to AcquireTimeout, then fails
	var busy *limiter.BusyError
	fmt.Println("third:", errors.Is(err, limiter.ErrBusy), errors.As(err, &busy))

	body, _ := io.ReadAll(a.Body) // reading to the end releases
	a.Body.Close()                // (releasing only once)
	b.Body.Close()                // and so does Close
	c, err := hc.Get(upstream.URL)
	if err != nil {
		panic(err)
	}
	c.Body.Close()
	fmt.Println("first:", string(body), "fourth:", c.StatusCode)
	// Output:
	// third: true true
	// first: pong fourth: 200
}

// At most 10 requests per second (bursts of 5) and 4 in flight to an
// API, across every process. When the API answers 429 with Retry-After,
// the Transport pauses the name for every process: later requests wait
// until the pause ends (or fail at once, when they cannot wait that
// long), and the 429 itself reaches the caller unchanged.
func ExampleNewTransport_rate() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	lc, err := limiter.New(rdb)
	if err != nil {
		panic(err)
	}
	defer lc.Close(context.Background())

	var calls atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1") // seconds, or an HTTP date
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, "ok")
	}))
	defer api.Close()

	rt, err := httplimit.NewTransport(lc, httplimit.TransportConfig{
		Name:           "example:billing",
		Limit:          4,
		Rate:           limiter.Rate{Events: 10, Per: time.Second, Burst: 5},
		AcquireTimeout: 3 * time.Second, // the rate slot and the permit together
		Key:            func(*http.Request) (string, bool) { return "api", true },
	}, httplimit.PauseOnRetryAfter(time.Minute)) // never pause longer than a minute (default 5)
	if err != nil {
		panic(err)
	}
	hc := &http.Client{Transport: rt}
	defer hc.CloseIdleConnections()

	first, _ := hc.Get(api.URL)
	first.Body.Close()
	fmt.Println("first:", first.StatusCode, "Retry-After", first.Header.Get("Retry-After"))
	st, _ := inspect.New(lc).Rate(context.Background(), "example:billing:api")
	fmt.Println("paused for every process:", st.Paused > 0)

	// A caller that cannot wait out the pause fails at once.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api.URL, nil)
	_, err = hc.Do(req)
	var busy *limiter.BusyError
	fmt.Println("in a hurry:", errors.As(err, &busy) && busy.Paused)

	start := time.Now()
	second, err := hc.Get(api.URL) // sleeps until the pause ends
	if err != nil {
		panic(err)
	}
	second.Body.Close()
	fmt.Println("second:", second.StatusCode, "after the pause:", time.Since(start) > 500*time.Millisecond)
	// Output:
	// first: 429 Retry-After 1
	// paused for every process: true
	// in a hurry: true
	// second: 200 after the pause: true
}
