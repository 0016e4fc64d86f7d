package postgres

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/llm4agents/llm4agents/internal/store"
)

// secret is the password of every hostile DSN: distinctive enough that
// finding it, or a telling part of it, in an error or a log line is a leak.
const secret = "Sup3rS3cretPw"

// noLeak fails the test if text holds the password or a telling part of it.
func noLeak(t *testing.T, what, text string) {
	t.Helper()
	for _, part := range []string{secret, "S3cret", "Sup3r"} {
		if strings.Contains(text, part) {
			t.Errorf("%s leaks the password (%q): %s", what, part, text)
		}
	}
}

// TestOpenRejectsBadDSN checks that a malformed DSN fails at once with a
// clear error that carries neither the DSN nor its password.
func TestOpenRejectsBadDSN(t *testing.T) {
	tests := []struct{ name, dsn, want string }{
		{"empty", "", "empty DSN"},
		{"blank", "   ", "empty DSN"},
		{"other scheme", "mysql://u:" + secret + "@h/db", `scheme "mysql"`},
		{"http scheme", "http://u:" + secret + "@h/db", `scheme "http"`},
		{"no scheme before ://", "u:" + secret + "@h://db", "invalid DSN"},
		{"long scheme", "Sup3rS3cretPwSup3rS3cretPw://u@h/db", "invalid DSN"},
		{"port not a number", "postgres://u:" + secret + "@h:notaport/db", "invalid DSN"},
		{"unclosed IPv6 host", "postgres://u:" + secret + "@[::1/db", "invalid DSN"},
		{"bad escape in password", "postgres://u:Sup3r%zzS3cretPw@h/db", "invalid DSN"},
		{"password with a colon and an at", "postgres://u:Sup3r:S3cret@Pw@h:x/db", "invalid DSN"},
		{"bad sslmode", "postgres://u:" + secret + "@h/db?sslmode=bogus", "invalid DSN"},
		{"password in the query", "postgresql://u@h/db?password=" + secret + "&sslmode=bogus", "invalid DSN"},
		{"pool size zero", "postgres://u:" + secret + "@h/db?pool_max_conns=0", "pool_max_conns"},
		{"pool size is the password", "postgres://u@h/db?pool_max_conns=" + secret, "pool_max_conns"},
		{"bad connect_timeout", "postgres://u:" + secret + "@h/db?connect_timeout=" + secret, "connect_timeout"},
		{"kv bad port", "host=h password=" + secret + " port=notaport", "invalid DSN"},
		{"kv quoted, bad sslmode", "host=h password='Sup3r S3cretPw' sslmode=bogus", "invalid DSN"},
		{"kv unterminated quote", "host=h password='" + secret, "invalid DSN"},
		{"kv no equals", "host=h password=" + secret + " garbage", "invalid DSN"},
		{"kv password with a space", "host=h password=Sup3r S3cretPw", "invalid DSN"},
		{"kv bad sslmode, reason kept", "host=h password=" + secret + " sslmode=bogus", "sslmode is invalid"},
		{"kv session attrs echo the password", "host=h password=" + secret + " target_session_attrs=" + secret, "target_session_attrs"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			log, logs := logger()
			began := time.Now()
			db, err := Open(t.Context(), tc.dsn, log)
			if err == nil {
				_ = db.Close()
				t.Fatalf("Open(%q) succeeded, want an error", tc.dsn)
			}
			if time.Since(began) > time.Second {
				t.Errorf("Open() took %v to refuse a malformed DSN", time.Since(began))
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open() error %q does not contain %q", err, tc.want)
			}
			if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrFenced) {
				t.Errorf("Open() error %q matches a store sentinel", err)
			}
			noLeak(t, "error", err.Error())
			noLeak(t, "log", logs.String())
		})
	}
}

// FuzzParseConfig checks that whatever the password holds (characters that
// break the DSN's syntax included) and whatever surrounds it, a DSN that
// does not parse yields an error without the password.
func FuzzParseConfig(f *testing.F) {
	f.Add("pw", "", uint8(0))
	f.Add("p@ss:w/rd", "sslmode=bogus", uint8(0))
	f.Add("a' b", "port=x", uint8(1))
	f.Add("x%zz", "target_session_attrs=%s", uint8(2))
	f.Add(`\'`, "", uint8(3))
	f.Add("a b&pool_max_conns=", "pool_max_conns=", uint8(2))
	f.Fuzz(func(t *testing.T, middle, extra string, form uint8) {
		pw := "Zq9" + middle + "Xk7"
		var dsn string
		switch form % 4 {
		case 0: // raw in the URL's userinfo
			dsn = "postgres://u:" + pw + "@h:5432/db?" + extra
		case 1: // key=value, quoted
			dsn = "host=h password='" + pw + "' " + extra
		case 2: // key=value, bare
			dsn = "host=h password=" + pw + " " + extra
		case 3: // URL query
			dsn = "postgresql://u@h/db?password=" + url.QueryEscape(pw) + "&" + extra
		}
		_, _, err := parseConfig(dsn)
		if err != nil && strings.Contains(err.Error(), pw) {
			t.Errorf("parseConfig(%q) error leaks the password %q: %v", dsn, pw, err)
		}
	})
}

// TestParseConfig checks the settings Open adds to a DSN and those it
// leaves to the DSN.
func TestParseConfig(t *testing.T) {
	tests := []struct {
		name        string
		dsn         string
		maxConns    int32
		connTimeout time.Duration
		appName     string
		searchPath  string
	}{
		{"defaults", "postgres://u@h/db", defaultMaxConns, defaultConnectTimeout, "llm4agents", ""},
		{"kv defaults", "host=h user=u dbname=db", defaultMaxConns, defaultConnectTimeout, "llm4agents", ""},
		{"set by the DSN", "postgresql://u@h/db?pool_max_conns=3&connect_timeout=2&application_name=gw&search_path=s1",
			3, 2 * time.Second, "gw", "s1"},
		{"kv set by the DSN", "host=h pool_max_conns=5 search_path=s2", 5, defaultConnectTimeout, "llm4agents", "s2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _, err := parseConfig(tc.dsn)
			if err != nil {
				t.Fatal(err)
			}
			rp := cfg.ConnConfig.RuntimeParams
			if cfg.MaxConns != tc.maxConns || cfg.ConnConfig.ConnectTimeout != tc.connTimeout ||
				rp["application_name"] != tc.appName || rp["search_path"] != tc.searchPath {
				t.Errorf("MaxConns %d, ConnectTimeout %v, application_name %q, search_path %q; want %d, %v, %q, %q",
					cfg.MaxConns, cfg.ConnConfig.ConnectTimeout, rp["application_name"], rp["search_path"],
					tc.maxConns, tc.connTimeout, tc.appName, tc.searchPath)
			}
			// The statements are written for READ COMMITTED, whatever the DSN says.
			if got := rp["default_transaction_isolation"]; got != "read committed" {
				t.Errorf("default_transaction_isolation = %q, want read committed", got)
			}
		})
	}
	cfg, _, err := parseConfig("postgres://u@h/db?default_transaction_isolation=serializable")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.ConnConfig.RuntimeParams["default_transaction_isolation"]; got != "read committed" {
		t.Errorf("a DSN asking for serializable: default_transaction_isolation = %q, want read committed", got)
	}
}

// fakeServer listens on a local port and runs serve for every connection,
// until the test ends; it returns the address.
func fakeServer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { serve(c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// TestOpenUnreachable checks that Open fails fast and cleanly when nothing
// listens, when the server never answers (within ctx's deadline), and when
// the server refuses the login quoting the password it was sent.
func TestOpenUnreachable(t *testing.T) {
	silent := fakeServer(t, func(c net.Conn) {
		<-t.Context().Done() // accepts, never answers
	})
	// A hostile or broken server may quote anything in its error, the
	// password it received included: the store must not pass it on.
	quoting := fakeServer(t, func(c net.Conn) {
		defer func() { _ = c.Close() }()
		be := pgproto3.NewBackend(c, c)
		if _, err := be.ReceiveStartupMessage(); err != nil {
			return
		}
		be.Send(&pgproto3.AuthenticationCleartextPassword{})
		if err := be.Flush(); err != nil {
			return
		}
		if err := be.SetAuthType(pgproto3.AuthTypeCleartextPassword); err != nil {
			return
		}
		msg, err := be.Receive()
		if err != nil {
			return
		}
		pw, _ := msg.(*pgproto3.PasswordMessage)
		if pw == nil {
			return
		}
		be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", Code: "28P01",
			Message: `password authentication failed for user "u" with password "` + pw.Password + `"`,
			Detail:  "tried " + pw.Password})
		_ = be.Flush()
	})
	tests := []struct {
		name    string
		dsn     string
		timeout time.Duration
		want    []string // in the error
		is      error
	}{
		{"nothing listens", "postgres://u:" + secret + "@127.0.0.1:1/db?sslmode=disable", 10 * time.Second,
			[]string{"open", "127.0.0.1:1"}, nil},
		{"kv nothing listens", "host=127.0.0.1 port=1 user=u password=" + secret + " sslmode=disable", 10 * time.Second,
			[]string{"open", "127.0.0.1:1"}, nil},
		{"server never answers", "postgres://u:" + secret + "@" + silent + "/db?sslmode=disable", 300 * time.Millisecond,
			[]string{"open"}, context.DeadlineExceeded},
		{"server quotes the password", "postgres://u:" + secret + "@" + quoting + "/db?sslmode=disable", 10 * time.Second,
			[]string{"open", "28P01", "password authentication failed"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), tc.timeout)
			defer cancel()
			log, logs := logger()
			began := time.Now()
			db, err := Open(ctx, tc.dsn, log)
			if err == nil {
				_ = db.Close()
				t.Fatal("Open() succeeded, want an error")
			}
			if took := time.Since(began); took > tc.timeout+2*time.Second {
				t.Errorf("Open() took %v, want it within the %v deadline", took, tc.timeout)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Open() error %q does not contain %q", err, want)
				}
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("Open() error %q is not %v", err, tc.is)
			}
			noLeak(t, "error", err.Error())
			noLeak(t, "log", logs.String())
			var pe *pgconn.PgError
			var ce *pgconn.ConnectError
			if errors.As(err, &pe) || errors.As(err, &ce) {
				t.Errorf("Open() error %q holds a pgconn error type", err)
			}
		})
	}
}

// TestOpenRefusedLogin checks what the real server says to a login it
// refuses, and to a wrong password (which a trust-authenticated test server
// may accept): the password appears in neither errors nor logs.
func TestOpenRefusedLogin(t *testing.T) {
	base := testDSN(t)
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Skip("LLM4AGENTS_TEST_POSTGRES_DSN is not a URL")
	}
	for _, user := range []string{"llm4agents_no_such_role", u.User.Username()} {
		t.Run(user, func(t *testing.T) {
			v := *u
			v.User = url.UserPassword(user, secret)
			log, logs := logger()
			db, err := Open(t.Context(), v.String(), log)
			if err == nil {
				_ = db.Close()
				if user == "llm4agents_no_such_role" {
					t.Fatal("Open() as a role that does not exist succeeded")
				}
			} else {
				noLeak(t, "error", err.Error())
			}
			noLeak(t, "log", logs.String())
		})
	}
}

// TestClosedDB checks that every method of a closed DB fails with an error
// saying so, never a panic, and that Close may be called again.
func TestClosedDB(t *testing.T) {
	_, dsn := freshSchema(t)
	db, err := Open(t.Context(), dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Errorf("second Close() = %v", err)
	}
	ctx := t.Context()
	exp := time.Now().Add(time.Hour)
	calls := map[string]func() error{
		"ClaimSettlement": func() error {
			_, _, err := db.ClaimSettlement(ctx, store.Settlement{Key: "k"}, time.Minute)
			return err
		},
		"UpdateSettlement": func() error {
			return db.UpdateSettlement(ctx, "k", 1, store.StateBroadcast, "0x1", "")
		},
		"ReleaseSettlement":   func() error { return db.ReleaseSettlement(ctx, "k", 1) },
		"MarkSuccessReported": func() error { _, err := db.MarkSuccessReported(ctx, "k"); return err },
		"Settlement":          func() error { _, err := db.Settlement(ctx, "k"); return err },
		"UnresolvedSettlements": func() error {
			_, err := db.UnresolvedSettlements(ctx, "eip155:1", 1)
			return err
		},
		"ClaimPayment": func() error {
			_, _, err := db.ClaimPayment(ctx, store.PaymentClaim{Key: "k", ExpiresAt: exp}, time.Minute)
			return err
		},
		"ReleasePayment": func() error { return db.ReleasePayment(ctx, "k", 1) },
		"UpdatePayment":  func() error { return db.UpdatePayment(ctx, "k", 1, store.PaymentSettled, "") },
		"StagePayment": func() error {
			return db.StagePayment(ctx, "k", 1, store.StagedResponse{Status: 200})
		},
		"Payment":              func() error { _, err := db.Payment(ctx, "k"); return err },
		"PurgeExpiredPayments": func() error { _, err := db.PurgeExpiredPayments(ctx, 1); return err },
		"Ping":                 func() error { return db.Ping(ctx) },
	}
	for name, call := range calls {
		err := call()
		if err == nil || !strings.Contains(err.Error(), "closed") {
			t.Errorf("%s on a closed DB = %v, want an error saying it is closed", name, err)
		}
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrFenced) {
			t.Errorf("%s on a closed DB = %v, a store sentinel", name, err)
		}
	}
}

// TestPing checks the readiness probe against a live server.
func TestPing(t *testing.T) {
	_, dsn := freshSchema(t)
	if err := open(t, dsn, nil, nil).Ping(t.Context()); err != nil {
		t.Errorf("Ping() = %v", err)
	}
}

// TestMapErrHidesDriverTypes checks that a server error leaves the package
// as text only.
func TestMapErrHidesDriverTypes(t *testing.T) {
	_, dsn := freshSchema(t)
	db := open(t, dsn, nil, nil)
	_, err := db.pool.Exec(t.Context(), "INSERT INTO settlement_fences (id, last) VALUES (1, 0)")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		t.Fatalf("duplicate insert: %v, want a driver error to start from", err)
	}
	mapped := db.mapErr(t.Context(), err)
	if errors.As(mapped, &pe) {
		t.Errorf("mapErr(%v) still holds a *pgconn.PgError", err)
	}
	if !strings.Contains(mapped.Error(), "23505") {
		t.Errorf("mapErr(%v) = %v, want the SQLSTATE kept in the text", err, mapped)
	}
}
