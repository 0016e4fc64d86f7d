// Package proctest builds the llm4agents binary and runs `llm4agents serve`
// processes for end-to-end tests: real processes, so that tests can run
// several replicas at once and kill or crash one (docs/DESIGN.md D21).
//
// BuildBinary compiles cmd/llm4agents once per set of build tags and test
// binary run. Start writes a config to a temporary file, runs
// `serve --config FILE`, and waits for the "gateway listening on URL" line. A
// process's stdout and stderr are kept and printed only when the test fails;
// the process is killed when the test ends, and by the kernel if the test
// binary dies first (on Linux).
//
// A package whose tests use BuildBinary runs them through Main, which removes
// the builds afterwards:
//
//	func TestMain(m *testing.M) { proctest.Main(m) }
package proctest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Timeouts of this package.
const (
	// BuildTimeout bounds one `go build` of the binary; the first build of
	// go-ethereum takes minutes on 2 cores.
	BuildTimeout = 10 * time.Minute
	// DefaultStartTimeout bounds the wait for the "gateway listening" line.
	DefaultStartTimeout = 30 * time.Second
	// stopTimeout bounds the wait for a killed process to be reaped.
	stopTimeout = 10 * time.Second
)

// mainPackage is what BuildBinary builds.
const mainPackage = "github.com/llm4agents/llm4agents/cmd/llm4agents"

// listeningPrefix starts the stdout line that says the gateway serves.
const listeningPrefix = "gateway listening on "

var builds = struct {
	sync.Mutex
	dir  string                  // set by Main: where cached builds go
	bins map[string]*buildResult // by tag set
}{bins: map[string]*buildResult{}}

type buildResult struct {
	once sync.Once
	path string
	err  error
}

// Main runs the tests of m and exits with their status, removing the binaries
// BuildBinary built on the way. Without it BuildBinary still works but builds
// into each test's own temporary directory, once per test.
func Main(m *testing.M) {
	dir, err := os.MkdirTemp("", "llm4agents-proctest-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "proctest: %v\n", err)
		os.Exit(2)
	}
	builds.Lock()
	builds.dir = dir
	builds.Unlock()
	code := m.Run()
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintf(os.Stderr, "proctest: remove builds: %v\n", err)
	}
	os.Exit(code)
}

// BuildBinary returns the path of cmd/llm4agents built with the given build
// tags. Under Main one build per tag set serves every test of the run; a
// build failure fails each test that asks for it, with the compiler's output.
func BuildBinary(tb testing.TB, tags ...string) string {
	tb.Helper()
	tags = slices.Sorted(slices.Values(tags))
	key := strings.Join(tags, ",")
	builds.Lock()
	dir := builds.dir
	var r *buildResult
	if dir != "" {
		r = builds.bins[key]
		if r == nil {
			r = &buildResult{}
			builds.bins[key] = r
		}
	}
	builds.Unlock()
	if r == nil { // no Main: no cache
		path, err := build(tb.TempDir(), tags)
		if err != nil {
			tb.Fatal(err)
		}
		return path
	}
	r.once.Do(func() {
		sub, err := os.MkdirTemp(dir, "build-")
		if err != nil {
			r.err = err
			return
		}
		r.path, r.err = build(sub, tags)
	})
	if r.err != nil {
		tb.Fatal(r.err)
	}
	return r.path
}

// build runs go build for the module's cmd/llm4agents into dir.
func build(dir string, tags []string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("proctest: build llm4agents: no go command on PATH: %w", err)
	}
	root, err := moduleRoot()
	if err != nil {
		return "", fmt.Errorf("proctest: build llm4agents: %w", err)
	}
	bin := filepath.Join(dir, "llm4agents")
	args := []string{"build", "-o", bin}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	args = append(args, mainPackage)
	ctx, cancel := context.WithTimeout(context.Background(), BuildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, args...) // #nosec G204 -- the go command with fixed arguments and the caller's tags
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("proctest: go %s (in %s): %w\n%s", strings.Join(args, " "), root, err, out)
	}
	return bin, nil
}

// moduleRoot walks up from the working directory (a test runs in its package
// directory) to the directory holding go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Options says how to run one process.
type Options struct {
	// Name labels the process's logs and errors ("replica 2"). Default
	// "llm4agents serve".
	Name string
	// ConfigYAML is the config, written to a temporary file for --config.
	ConfigYAML string
	// Env is added to the test's own environment (KEY=VALUE); later entries
	// win.
	Env []string
	// Args are appended after `serve --config FILE`.
	Args []string
	// StartTimeout bounds the wait for the "gateway listening" line. Default
	// DefaultStartTimeout.
	StartTimeout time.Duration
}

// Process is a running `llm4agents serve`.
type Process struct {
	// URL is the gateway's base URL, from its "gateway listening on" line.
	URL string
	// Pid is the process id.
	Pid int
	// Exited is closed once the process has exited and its output is read.
	Exited <-chan struct{}

	name   string
	cmd    *exec.Cmd
	logs   *logBuffer
	exited chan struct{}
}

// Start runs `bin serve --config FILE` with opts and returns once the
// process said it is listening. A process that exits or stays silent for
// opts.StartTimeout fails the test, with its output. The process is killed when
// the test ends; its output is logged if the test failed.
func Start(tb testing.TB, bin string, opts Options) *Process {
	tb.Helper()
	if opts.Name == "" {
		opts.Name = "llm4agents serve"
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	path := filepath.Join(tb.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(opts.ConfigYAML), 0o600); err != nil {
		tb.Fatal(err)
	}
	p := &Process{name: opts.Name, logs: &logBuffer{}, exited: make(chan struct{})}
	p.Exited = p.exited
	args := append([]string{"serve", "--config", path}, opts.Args...)
	// The process outlives any request context: Kill and the cleanup stop it.
	p.cmd = exec.CommandContext(context.Background(), bin, args...) // #nosec G204 G702 -- the binary BuildBinary built, run by a test
	p.cmd.Env = append(os.Environ(), opts.Env...)
	p.cmd.Stderr = p.logs
	p.cmd.SysProcAttr = killWithParent()
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		tb.Fatalf("%s: start %s: %v", p.name, bin, err)
	}
	p.Pid = p.cmd.Process.Pid
	ready := make(chan string, 1)
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			_, _ = fmt.Fprintf(p.logs, "%s\n", sc.Bytes())
			if u, ok := strings.CutPrefix(sc.Text(), listeningPrefix); ok {
				select {
				case ready <- strings.TrimSpace(u):
				default:
				}
			}
		}
		_, _ = io.Copy(p.logs, stdout)
		_ = p.cmd.Wait() // the status is read from ProcessState
	}()
	tb.Cleanup(func() {
		if err := p.Kill(); err != nil {
			tb.Error(err)
		}
		if tb.Failed() {
			tb.Logf("%s (pid %d) output:\n%s", p.name, p.Pid, p.Logs())
		}
	})
	timer := time.NewTimer(opts.StartTimeout)
	defer timer.Stop()
	select {
	case u := <-ready:
		p.URL = u
		return p
	case <-p.exited:
		tb.Fatalf("%s exited before it was ready (%s); its output is logged below", p.name, p.cmd.ProcessState)
	case <-timer.C:
		tb.Fatalf("%s (pid %d) not listening after %s; its output is logged below", p.name, p.Pid, opts.StartTimeout)
	}
	return nil
}

// Kill kills the process (SIGKILL: nothing of it runs after) and waits until
// it is reaped. Killing an exited process does nothing.
func (p *Process) Kill() error {
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%s: kill: %w", p.name, err)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("%s: pid %d still running %s after kill", p.name, p.Pid, stopTimeout)
	}
}

// Stop asks the process to stop (SIGTERM: it shuts down as an operator's
// stop would) and waits until it has exited.
func (p *Process) Stop() error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%s: stop: %w", p.name, err)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("%s: pid %d still running %s after SIGTERM", p.name, p.Pid, stopTimeout)
	}
}

// Wait waits until the process exits and returns its exit code, -1 when a
// signal killed it.
func (p *Process) Wait() int {
	<-p.exited
	return p.cmd.ProcessState.ExitCode()
}

// Logs returns what the process wrote so far, stdout and stderr interleaved.
func (p *Process) Logs() string { return p.logs.String() }

// logBuffer is a bytes.Buffer safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
