package redis_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/redis"
	"github.com/llm4agents/llm4agents/internal/store/storetest"
	"github.com/llm4agents/llm4agents/internal/testdb"
)

// testURL returns the Redis server tests run against, from
// LLM4AGENTS_TEST_REDIS_URL. Without it the test is skipped, or fails when
// LLM4AGENTS_TEST_REQUIRE_BACKENDS=1 (CI).
func testURL(tb testing.TB) string {
	tb.Helper()
	return testdb.Server(tb, testdb.RedisEnv)
}

// freshURL returns a URL of the test server with a key prefix no other test
// uses, and the prefix; the prefix's keys are deleted when the test ends.
func freshURL(tb testing.TB) (rawURL, prefix string) {
	tb.Helper()
	return testdb.RedisPrefix(tb, "store")
}

// rawClient is a plain go-redis client on the test server, to look at and
// tamper with what the store wrote.
func rawClient(tb testing.TB, rawURL string) *goredis.Client {
	tb.Helper()
	opts, err := goredis.ParseURL(rawURL)
	if err != nil {
		tb.Fatal(err)
	}
	c := goredis.NewClient(opts)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// open opens a store on rawURL with clock now (nil: the server's) and closes
// it when the test ends.
func open(tb testing.TB, rawURL string, now func() time.Time) *redis.DB {
	tb.Helper()
	db, err := redis.Open(tb.Context(), rawURL, nil)
	if err != nil {
		tb.Fatalf("Open(): %v", err)
	}
	db.Now = now
	tb.Cleanup(func() {
		if err := db.Close(); err != nil {
			tb.Errorf("Close(): %v", err)
		}
	})
	return db
}

// pair opens two independent stores (two clients) on a fresh prefix.
func pair(t *testing.T, now func() time.Time) (a, b *redis.DB) {
	t.Helper()
	u, _ := freshURL(t)
	return open(t, u, now), open(t, u, now)
}

func TestSettlements(t *testing.T) {
	storetest.RunSettlements(t, func(t *testing.T, now func() time.Time) (a, b store.Settlements) {
		return pair(t, now)
	})
}

func TestPayments(t *testing.T) {
	storetest.RunPayments(t, func(t *testing.T, now func() time.Time) (a, b store.Payments) {
		return pair(t, now)
	})
}

// TestServerClock checks that with DB.Now nil leases are judged by the
// server's clock: a claim with a 1 s lease holds at once and can be taken
// over after 1.2 s, for both record types.
func TestServerClock(t *testing.T) {
	ctx := t.Context()
	a, b := pair(t, nil)
	before := time.Now()

	s1, ok, err := a.ClaimSettlement(ctx, store.Settlement{Key: "s", Amount: "1", Owner: "a"}, time.Second)
	if err != nil || !ok {
		t.Fatalf("ClaimSettlement() = %v, %v", ok, err)
	}
	p1, ok, err := a.ClaimPayment(ctx, store.PaymentClaim{Key: "p", Amount: "1", Owner: "a", ExpiresAt: before.Add(time.Hour)}, time.Second)
	if err != nil || !ok {
		t.Fatalf("ClaimPayment() = %v, %v", ok, err)
	}
	// The server runs on this machine, so its clock is near ours.
	for name, got := range map[string]time.Time{"settlement": s1.CreatedAt, "payment": p1.CreatedAt} {
		if d := got.Sub(before); d < -5*time.Second || d > 5*time.Second {
			t.Errorf("%s CreatedAt = %v, %v away from this machine's clock; want the server's time", name, got, d)
		}
	}
	if d := s1.LeaseUntil.Sub(s1.CreatedAt); d != time.Second {
		t.Errorf("settlement lease = %v, want 1s", d)
	}

	if got, ok, err := b.ClaimSettlement(ctx, store.Settlement{Key: "s", Amount: "1", Owner: "b"}, time.Second); ok || err != nil {
		t.Errorf("ClaimSettlement() at once = %+v, %v, %v; want held by a", got, ok, err)
	}
	if got, ok, err := b.ClaimPayment(ctx, store.PaymentClaim{Key: "p", Amount: "1", Owner: "b", ExpiresAt: before.Add(time.Hour)}, time.Second); ok || err != nil {
		t.Errorf("ClaimPayment() at once = %+v, %v, %v; want held by a", got, ok, err)
	}

	time.Sleep(1200 * time.Millisecond)

	s2, ok, err := b.ClaimSettlement(ctx, store.Settlement{Key: "s", Amount: "1", Owner: "b"}, time.Second)
	if err != nil || !ok || s2.Owner != "b" || s2.Fence <= s1.Fence {
		t.Errorf("ClaimSettlement() after the lease = %+v, %v, %v; want taken over by b with a fence above %d", s2, ok, err, s1.Fence)
	}
	p2, ok, err := b.ClaimPayment(ctx, store.PaymentClaim{Key: "p", Amount: "1", Owner: "b", ExpiresAt: before.Add(time.Hour)}, time.Second)
	if err != nil || !ok || p2.Owner != "b" || p2.Fence <= p1.Fence {
		t.Errorf("ClaimPayment() after the lease = %+v, %v, %v; want taken over by b with a fence above %d", p2, ok, err, p1.Fence)
	}
}

// TestOpenBadURL checks that malformed URLs and options fail at Open with a
// clear error, before any connection.
func TestOpenBadURL(t *testing.T) {
	tests := []struct {
		name, url, want string
	}{
		{"empty", "", "scheme"},
		{"other scheme", "postgres://127.0.0.1:5432/test", "scheme"},
		{"unix socket", "unix:///tmp/redis.sock", "scheme"},
		{"no host part", "redis:127.0.0.1", "no host"},
		{"bad port", "redis://127.0.0.1:port/0", "port"},
		{"bad database", "redis://127.0.0.1:6379/zero", "database"},
		{"two path segments", "redis://127.0.0.1:6379/0/1", "path"},
		{"unknown option", "redis://127.0.0.1:6379/0?color=blue", "color"},
		{"bad option value", "redis://127.0.0.1:6379/0?dial_timeout=soon", "dial_timeout"},
		{"bad query escape", "redis://127.0.0.1:6379/0?key_prefix=%zz", "query"},
		{"max_retries", "redis://127.0.0.1:6379/0?max_retries=3", "max_retries"},
		{"empty key_prefix", "redis://127.0.0.1:6379/0?key_prefix=", "empty"},
		{"long key_prefix", "redis://127.0.0.1:6379/0?key_prefix=" + strings.Repeat("p", 65), "over 64"},
		{"key_prefix with braces", "redis://127.0.0.1:6379/0?key_prefix=%7Bl4a%7D", "character"},
		{"key_prefix with a closing brace", "redis://127.0.0.1:6379/0?key_prefix=l4a%7D", "character"},
		{"key_prefix with a glob", "redis://127.0.0.1:6379/0?key_prefix=l4a*", "character"},
		{"key_prefix with a space", "redis://127.0.0.1:6379/0?key_prefix=l4a+x", "character"},
		{"key_prefix twice", "redis://127.0.0.1:6379/0?key_prefix=a&key_prefix=b", "2 times"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			db, err := redis.Open(t.Context(), tc.url, nil)
			if err == nil {
				_ = db.Close()
				t.Fatalf("Open(%q) succeeded, want an error", tc.url)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open(%q) = %v, want an error mentioning %q", tc.url, err, tc.want)
			}
			if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrFenced) {
				t.Errorf("Open(%q) = %v, a store sentinel", tc.url, err)
			}
		})
	}
	// 64 bytes is the longest prefix, accepted up to the connection.
	ok := "redis://127.0.0.1:1/0?key_prefix=" + strings.Repeat("p", 64) + "&dial_timeout=100ms"
	if _, err := redis.Open(t.Context(), ok, nil); err == nil || strings.Contains(err.Error(), "key_prefix") {
		t.Errorf("Open(64-byte prefix, closed port) = %v; want a connection error", err)
	}
}

const secret = "s3cr3tHunter2pw"

// leaks fails the test if the password shows in err or the log output.
func leaks(t *testing.T, what string, err error, logs *bytes.Buffer) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), secret) {
		t.Errorf("%s: error %q shows the password", what, err)
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("%s: log output shows the password:\n%s", what, logs)
	}
}

func debugLogger() (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), &buf
}

// TestPasswordNeverShown checks errors and logs of URLs with a password that
// do not parse, point nowhere, or do not authenticate.
func TestPasswordNeverShown(t *testing.T) {
	bad := []string{
		"redis://user:" + secret + "@127.0.0.1:port/0",
		"redis://user:" + secret + "@127.0.0.1:6379/zero",
		"redis://user:" + secret + "@127.0.0.1:6379/0?color=blue",
		"redis://user:" + secret + "@127.0.0.1:6379/0?key_prefix=%7B",
		"redis://user:" + secret + "%zz@127.0.0.1:6379/0",
		"redis://user:" + secret + " x@127.0.0.1:6379/0",
		"redis://user:" + secret + "@[::1/0",
		"redis://:" + secret + "@127.0.0.1:1/0?dial_timeout=100ms",
		"rediss://:" + secret + "@127.0.0.1:1/0?dial_timeout=100ms",
	}
	for _, u := range bad {
		log, buf := debugLogger()
		db, err := redis.Open(t.Context(), u, log)
		if err == nil {
			_ = db.Close()
			t.Errorf("Open(%q) succeeded, want an error", u)
			continue
		}
		leaks(t, "bad URL", err, buf)
	}
	if os.Getenv("LLM4AGENTS_TEST_REDIS_URL") == "" {
		return // the wrong-password case needs the server
	}
	base, err := url.Parse(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	// A user the server does not know: refused whatever its ACL setup.
	base.User = url.UserPassword("llm4agents-no-such-user", secret)
	log, buf := debugLogger()
	db, err := redis.Open(t.Context(), base.String(), log)
	if err == nil {
		_ = db.Close()
		t.Fatal("Open() with an unknown user succeeded, want an error")
	}
	if !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("Open() with an unknown user = %v, want the server's WRONGPASS", err)
	}
	leaks(t, "wrong password", err, buf)
}

// TestOpenUnreachable checks that a server that does not answer fails Open
// with a clear error within the context's deadline.
func TestOpenUnreachable(t *testing.T) {
	for _, u := range []string{
		"redis://127.0.0.1:1/0",                     // connection refused
		"redis://192.0.2.1:6379/0?dial_timeout=30s", // TEST-NET-1: no answer; the context's deadline ends the wait
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		began := time.Now()
		db, err := redis.Open(ctx, u, nil)
		cancel()
		if err == nil {
			_ = db.Close()
			t.Errorf("Open(%q) succeeded, want an error", u)
			continue
		}
		if waited := time.Since(began); waited > 3*time.Second {
			t.Errorf("Open(%q) took %v, want about the 500ms deadline", u, waited)
		}
		if !strings.Contains(err.Error(), "ping") || !strings.Contains(err.Error(), "redis: open") {
			t.Errorf("Open(%q) = %v, want an error saying the server did not answer", u, err)
		}
	}
}

// TestClosed checks that every operation on a closed store fails with an
// error, never a panic.
func TestClosed(t *testing.T) {
	u, _ := freshURL(t)
	db, err := redis.Open(t.Context(), u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("Close(): %v", err)
	}
	if err := db.Close(); err != nil {
		t.Errorf("second Close() = %v, want nil", err)
	}
	ctx := t.Context()
	exp := time.Now().Add(time.Hour)
	calls := map[string]func() error{
		"ClaimSettlement": func() error {
			_, _, err := db.ClaimSettlement(ctx, store.Settlement{Key: "k", Amount: "1"}, time.Minute)
			return err
		},
		"UpdateSettlement": func() error {
			return db.UpdateSettlement(ctx, "k", 1, store.StateBroadcast, "0x1", "")
		},
		"ReleaseSettlement": func() error { return db.ReleaseSettlement(ctx, "k", 1) },
		"MarkSuccessReported": func() error {
			_, err := db.MarkSuccessReported(ctx, "k")
			return err
		},
		"Settlement": func() error {
			_, err := db.Settlement(ctx, "k")
			return err
		},
		"UnresolvedSettlements": func() error {
			_, err := db.UnresolvedSettlements(ctx, "eip155:8453", 10)
			return err
		},
		"RecentSettlements": func() error {
			_, err := db.RecentSettlements(ctx, "eip155:8453", time.Time{}, 10)
			return err
		},
		"MarkReorg": func() error {
			_, err := db.MarkReorg(ctx, "k", "0x1", store.ReorgDropped, "")
			return err
		},
		"ClaimPayment": func() error {
			_, _, err := db.ClaimPayment(ctx, store.PaymentClaim{Key: "k", Amount: "1", ExpiresAt: exp}, time.Minute)
			return err
		},
		"UpdatePayment":  func() error { return db.UpdatePayment(ctx, "k", 1, store.PaymentSettled, "") },
		"ReleasePayment": func() error { return db.ReleasePayment(ctx, "k", 1) },
		"StagePayment": func() error {
			return db.StagePayment(ctx, "k", 1, store.StagedResponse{Status: 200})
		},
		"Payment": func() error {
			_, err := db.Payment(ctx, "k")
			return err
		},
		"PurgeExpiredPayments": func() error {
			_, err := db.PurgeExpiredPayments(ctx, 10)
			return err
		},
		"Ping": func() error { return db.Ping(ctx) },
	}
	for name, call := range calls {
		err := call()
		if err == nil || !strings.Contains(err.Error(), "closed") {
			t.Errorf("%s on a closed store = %v, want an error saying it is closed", name, err)
		}
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrFenced) {
			t.Errorf("%s on a closed store = %v, a store sentinel", name, err)
		}
	}
}

// TestContextErrors checks that a cancelled or expired context comes back as
// the context's error.
func TestContextErrors(t *testing.T) {
	a, _ := pair(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, _, err := a.ClaimSettlement(ctx, store.Settlement{Key: "k", Amount: "1"}, time.Minute); !errors.Is(err, context.Canceled) {
		t.Errorf("ClaimSettlement(cancelled) = %v, want context.Canceled", err)
	}
	ctx, cancel = context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel()
	if _, err := a.Payment(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Payment(expired deadline) = %v, want context.DeadlineExceeded", err)
	}
	if _, err := a.Settlement(t.Context(), "k"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Settlement() after the cancelled claim = %v, want ErrNotFound", err)
	}
}

// TestConcurrentOpenClose opens and closes stores while others work, to let
// the race detector look at Open and Close.
func TestConcurrentOpenClose(t *testing.T) {
	u, _ := freshURL(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			db, err := redis.Open(t.Context(), u, nil)
			if err != nil {
				errs <- err
				return
			}
			defer func() { _ = db.Close() }()
			key := "k" + string(rune('0'+i))
			if _, _, err := db.ClaimSettlement(t.Context(), store.Settlement{Key: key, Amount: "1"}, time.Minute); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// BenchmarkPing is the floor BenchmarkStore's numbers stand on: a bare
// PING round trip through the store's client with the same 32 concurrent
// callers, so a shared or loaded machine can be judged by the ratio.
func BenchmarkPing(b *testing.B) {
	db := open(b, testURL(b), nil)
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, storetest.BenchWorkers)
	b.ResetTimer()
	began := time.Now()
	for range storetest.BenchWorkers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < b.N; i = int(next.Add(1)) - 1 {
				t0 := time.Now()
				if err := db.Ping(b.Context()); err != nil {
					errs <- err
					return
				}
				lat[i] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(began)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(float64(lat[(50*len(lat)+99)/100-1])/1e6, "p50-ms")
	b.ReportMetric(float64(lat[(99*len(lat)+99)/100-1])/1e6, "p99-ms")
}

func BenchmarkStore(b *testing.B) {
	testURL(b) // without a server, skip (or fail) before the suite starts
	storetest.RunBenchmarks(b, func(b *testing.B) (store.Settlements, store.Payments) {
		u, _ := freshURL(b)
		db := open(b, u, nil)
		return db, db
	})
}

// TestScrubsEchoedPassword runs Open against a fake server that answers every
// command with an error quoting the command, password included, to check the
// store scrubs what a hostile or broken server sends back.
func TestScrubsEchoedPassword(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { echoErrors(conn) })
		}
	})
	log, buf := debugLogger()
	db, err := redis.Open(t.Context(), "redis://user:"+secret+"@"+ln.Addr().String()+"/0", log)
	if err == nil {
		_ = db.Close()
		t.Fatal("Open() against the fake server succeeded, want an error")
	}
	if !strings.Contains(err.Error(), "xxxxx") {
		t.Errorf("Open() = %v, want the server's text with the password scrubbed", err)
	}
	leaks(t, "echoing server", err, buf)
}

// echoErrors reads RESP commands from conn and answers each with an error
// that quotes its arguments, until the client hangs up.
func echoErrors(conn net.Conn) {
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	for {
		line, err := r.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "*") {
			return
		}
		n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
		if err != nil {
			return
		}
		var args []string
		for range n {
			if _, err := r.ReadString('\n'); err != nil { // $len
				return
			}
			arg, err := r.ReadString('\n')
			if err != nil {
				return
			}
			args = append(args, strings.TrimSpace(arg))
		}
		if _, err := fmt.Fprintf(conn, "-ERR you sent %s\r\n", strings.Join(args, " ")); err != nil {
			return
		}
	}
}
