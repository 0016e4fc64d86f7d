package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDemoServe is the README's copy-paste path: `demo --serve` keeps the
// gateway up after the walkthrough with the buyer's key in a file, `pay`
// with that file buys a completion from it, and stopping the demo removes
// the key file.
func TestDemoServe(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	addr := freeLoopbackAddr(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, errOut, done := startDemo(t, ctx, addr)
	keyFile := demoKeyFile()
	for _, want := range []string{"http://" + addr, "pay --key-file " + keyFile, "chat --key-file " + keyFile} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, out.String())
		}
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file %s: %v, mode %v; want it written 0600", keyFile, err, fi)
	}

	asset := regexp.MustCompile(`--asset (eip155:1337/0x[0-9a-fA-F]{40})`).FindStringSubmatch(out.String())
	if asset == nil {
		t.Fatalf("stdout names no --asset for pay:\n%s", out.String())
	}
	stdout, stderr, err := runBounded(t, time.Minute, []string{"pay", "--key-file", keyFile, "--asset", asset[1], "-d",
		`{"model":"demo","messages":[{"role":"user","content":"hi"}]}`, "http://" + addr + "/v1/chat/completions"}, envMap(nil))
	if err != nil || !strings.Contains(stdout, `"chat.completion"`) {
		t.Errorf("pay against the demo: err %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	// The README's two commands for a buyer's bill: every receipt of the
	// account is in the log (the paid call just made included, once its
	// logBy passed), and an audit of the whole log checks.
	url := "http://" + addr
	vout, verr, err := runBounded(t, time.Minute, []string{"receipts", "verify", "--url", url, "--key-file", keyFile, "--all"}, envMap(nil))
	if err != nil || strings.Count(vout, "included  0x") != 6 || !strings.Contains(vout, "consistent with every checkpoint seen") {
		t.Errorf("receipts verify --all: err %v\nstdout:\n%s\nstderr:\n%s", err, vout, verr)
	}
	aout, aerr, err := runBounded(t, time.Minute, []string{"log", "audit", "--url", url, "--json"}, envMap(nil))
	var audit struct {
		Size       int64  `json:"size"`
		Checkpoint string `json:"checkpoint"`
		Totals     []struct {
			Rail     string `json:"rail"`
			Receipts int64  `json:"receipts"`
		} `json:"totals"`
	}
	if err != nil || json.Unmarshal([]byte(aout), &audit) != nil || audit.Size != 6 || len(audit.Totals) != 4 {
		t.Errorf("log audit: err %v %+v\nstdout:\n%s\nstderr:\n%s", err, audit, aout, aerr)
	}
	since := strings.ReplaceAll(audit.Checkpoint, "\n", `\n`)
	if _, aerr, err := runBounded(t, time.Minute, []string{"log", "audit", "--url", url, "--since", since}, envMap(nil)); err != nil {
		t.Errorf("log audit --since its own checkpoint: %v\n%s", err, aerr)
	}
	// The same size with another root: a fork.
	lines := strings.Split(audit.Checkpoint, "\n")
	if len(lines) < 3 {
		t.Fatalf("checkpoint %q", audit.Checkpoint)
	}
	forged := lines[0] + `\n` + lines[1] + `\n` + "AAAA" + lines[2][4:]
	if _, _, err := runBounded(t, time.Minute, []string{"log", "audit", "--url", url, "--since", forged}, envMap(nil)); err == nil || !strings.Contains(err.Error(), "forked") {
		t.Errorf("log audit --since a checkpoint of another root: %v, want a fork", err)
	}
	for _, k := range devKeysHex() {
		if strings.Contains(out.String()+errOut.String()+stdout+stderr+vout+verr, k) {
			t.Errorf("a dev key was printed")
		}
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("demo --serve after Ctrl-C: %v", err)
	}
	if _, err := os.Stat(keyFile); !os.IsNotExist(err) {
		t.Errorf("key file %s still there after the demo stopped (%v)", keyFile, err)
	}
}

// startDemo runs `demo --serve addr` until ctx ends and returns once it
// serves: its stdout and stderr, and the channel its end is sent on.
func startDemo(t *testing.T, ctx context.Context, addr string) (stdout, stderr *syncBuffer, done <-chan error) {
	t.Helper()
	var out, errOut syncBuffer
	ended := make(chan error, 1)
	go func() { ended <- run(ctx, []string{"demo", "--serve", addr}, envMap(nil), &out, &errOut) }()
	for !strings.Contains(out.String(), "10. still serving") {
		select {
		case err := <-ended:
			t.Fatalf("demo --serve ended before serving: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
		case <-ctx.Done():
			t.Fatalf("demo --serve never said it was serving\nstdout:\n%s", out.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return &out, &errOut, ended
}

func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func TestDemoServeAddress(t *testing.T) {
	tests := []struct {
		addr    string
		wantErr string // "" means accepted
	}{
		{addr: "127.0.0.1:8402"},
		{addr: "localhost:8402"},
		{addr: "[::1]:8402"},
		{addr: "127.0.0.2:1"},
		{addr: "0.0.0.0:8402", wantErr: "not a loopback"},
		{addr: "192.168.1.10:8402", wantErr: "not a loopback"},
		{addr: "example.com:8402", wantErr: "not a loopback"},
		{addr: ":8402", wantErr: "not a loopback"},
		{addr: "127.0.0.1", wantErr: "not host:port"},
		{addr: "127.0.0.1:0", wantErr: "not 1-65535"},
		{addr: "127.0.0.1:65536", wantErr: "not 1-65535"},
		{addr: "127.0.0.1:http", wantErr: "not 1-65535"},
		{addr: "127.0.0.1:-1", wantErr: "not 1-65535"},
		{addr: strings.Repeat("a", 500) + ":1", wantErr: "not a loopback"},
	}
	for _, tt := range tests {
		t.Run(tt.addr[:min(len(tt.addr), 40)], func(t *testing.T) {
			err := loopbackAddr(tt.addr)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("loopbackAddr(%q) = %v, want nil", tt.addr, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("loopbackAddr(%q) = %v, want an error with %q", tt.addr, err, tt.wantErr)
			case err != nil && len(err.Error()) > 200:
				t.Errorf("error is %d bytes long: the address must be shortened", len(err.Error()))
			}
		})
	}
	if _, _, err := runBounded(t, 10*time.Second, []string{"demo", "--serve", "0.0.0.0:8402"}, envMap(nil)); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("demo --serve 0.0.0.0:8402 = %v, want a refusal before anything starts", err)
	}
}
