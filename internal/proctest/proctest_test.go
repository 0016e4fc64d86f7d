package proctest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeEnv makes the test binary act as a fake `llm4agents serve` (see
// fakeServe) instead of running tests.
const fakeEnv = "PROCTEST_FAKE_SERVE"

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeEnv); mode != "" {
		fakeServe(mode, os.Args[1:])
	}
	Main(m)
}

// fakeServe is a stand-in for `llm4agents serve --config FILE ARGS...`.
// Mode "serve" listens and says so like the real one, then serves /config
// (the file), /args (ARGS), /env/NAME and /exit/CODE (exits with CODE after
// a line on stderr); "fail" writes an error and exits 1 before listening;
// "silent" never says it listens.
func fakeServe(mode string, args []string) {
	if len(args) < 3 || args[0] != "serve" || args[1] != "--config" {
		fmt.Fprintf(os.Stderr, "fake serve: unexpected arguments %q\n", args)
		os.Exit(2)
	}
	cfg, err := os.ReadFile(args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	switch mode {
	case "fail":
		fmt.Fprintln(os.Stderr, "serve: store.dsn: is required")
		os.Exit(1)
	case "silent":
		time.Sleep(time.Hour)
	}
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/config", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(cfg) })
	mux.HandleFunc("/args", func(w http.ResponseWriter, _ *http.Request) { _, _ = fmt.Fprint(w, strings.Join(args[3:], " ")) })
	mux.HandleFunc("/env/{name}", func(w http.ResponseWriter, r *http.Request) { _, _ = fmt.Fprint(w, os.Getenv(r.PathValue("name"))) })
	mux.HandleFunc("/exit/{code}", func(_ http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.PathValue("code"))
		fmt.Fprintln(os.Stderr, "fake serve: exiting")
		os.Exit(code)
	})
	fmt.Println("some startup chatter")
	fmt.Printf("gateway listening on http://%s\n", ln.Addr())
	_ = (&http.Server{Handler: mux, ReadHeaderTimeout: time.Second}).Serve(ln)
	os.Exit(0)
}

func get(t *testing.T, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestStartPassesConfigEnvAndArgs(t *testing.T) {
	p := Start(t, os.Args[0], Options{
		Name:       "fake",
		ConfigYAML: "listen: 127.0.0.1:0\n",
		Env:        []string{fakeEnv + "=serve", "PROCTEST_X=one", "PROCTEST_X=two"},
		Args:       []string{"--extra", "x"},
	})
	if !strings.HasPrefix(p.URL, "http://127.0.0.1:") {
		t.Fatalf("URL = %q", p.URL)
	}
	if got := get(t, p.URL+"/config"); got != "listen: 127.0.0.1:0\n" {
		t.Errorf("config file = %q", got)
	}
	if got := get(t, p.URL+"/env/PROCTEST_X"); got != "two" {
		t.Errorf("env PROCTEST_X = %q, want the later entry", got)
	}
	if got := get(t, p.URL+"/args"); got != "--extra x" {
		t.Errorf("args = %q", got)
	}
	if !strings.Contains(p.Logs(), "some startup chatter") {
		t.Errorf("logs lack stdout: %q", p.Logs())
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited:
	default:
		t.Fatal("Exited not closed after Kill returned")
	}
	if code := p.Wait(); code != -1 {
		t.Errorf("Wait() = %d after a kill, want -1", code)
	}
	if err := p.Kill(); err != nil {
		t.Errorf("second Kill: %v", err)
	}
}

func TestWaitReturnsTheExitCode(t *testing.T) {
	p := Start(t, os.Args[0], Options{Env: []string{fakeEnv + "=serve"}})
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, p.URL+"/exit/86", nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := http.DefaultClient.Do(req); err == nil {
		_ = resp.Body.Close()
		t.Fatal("the request to a process that exits got an answer")
	}
	select {
	case <-p.Exited:
	case <-time.After(10 * time.Second):
		t.Fatal("Exited not closed 10s after the process exited")
	}
	if code := p.Wait(); code != 86 {
		t.Errorf("Wait() = %d, want 86", code)
	}
	if !strings.Contains(p.Logs(), "fake serve: exiting") {
		t.Errorf("logs lack stderr: %q", p.Logs())
	}
}

// fatalTB records a Fatal instead of failing the test, and stops the
// goroutine as Fatal does.
type fatalTB struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fatalTB) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }
func (f *fatalTB) Failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.msg != ""
}

// startFails runs Start with opts on a fatalTB and returns its Fatal message.
func startFails(t *testing.T, bin string, opts Options) string {
	t.Helper()
	tb := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(tb, bin, opts)
		tb.Fatalf("Start returned")
	}()
	<-done
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return tb.msg
}

func TestStartFailsClearly(t *testing.T) {
	t.Run("exits", func(t *testing.T) {
		msg := startFails(t, os.Args[0], Options{Name: "replica 2", Env: []string{fakeEnv + "=fail"}})
		if !strings.Contains(msg, "replica 2 exited before it was ready (exit status 1)") {
			t.Errorf("Fatal message = %q", msg)
		}
	})
	t.Run("silent", func(t *testing.T) {
		msg := startFails(t, os.Args[0], Options{Env: []string{fakeEnv + "=silent"}, StartTimeout: 300 * time.Millisecond})
		if !strings.Contains(msg, "not listening after 300ms") {
			t.Errorf("Fatal message = %q", msg)
		}
	})
	t.Run("no binary", func(t *testing.T) {
		msg := startFails(t, "/nonexistent/llm4agents", Options{})
		if !strings.Contains(msg, "start /nonexistent/llm4agents") {
			t.Errorf("Fatal message = %q", msg)
		}
	})
}

func TestBuildBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/llm4agents")
	}
	a := BuildBinary(t)
	if b := BuildBinary(t); b != a {
		t.Errorf("second build at %s, want the cached %s", b, a)
	}
	tagged := BuildBinary(t, "l4a_unsafe_noclaim")
	if tagged == a {
		t.Errorf("tagged build shares the untagged path %s", a)
	}
	for _, bin := range []string{a, tagged} {
		out, err := exec.CommandContext(t.Context(), bin, "help").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "serve") {
			t.Errorf("%s help: %v\n%s", bin, err, out)
		}
	}
	if _, err := os.Stat(a); errors.Is(err, os.ErrNotExist) {
		t.Errorf("built binary %s is gone", a)
	}
}
