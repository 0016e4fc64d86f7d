package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestLedger runs the ledger conformance suite, property test included, with
// two DB values on one temporary file, as two processes would share it.
func TestLedger(t *testing.T) {
	storetest.RunLedger(t, func(t *testing.T, now func() time.Time) (a, b store.Ledger) {
		path := filepath.Join(t.TempDir(), "llm4agents.db")
		return open(t, path, now), open(t, path, now)
	})
}

// BenchmarkLedger runs the ledger benchmarks every backend shares.
func BenchmarkLedger(b *testing.B) {
	storetest.RunLedgerBenchmarks(b, func(b *testing.B) store.Ledger {
		return open(b, filepath.Join(b.TempDir(), "llm4agents.db"), nil)
	})
}

// TestLedgerCreditOverflow checks that a credit never takes an owner's user
// plus held balance past int64, so that no release can overflow later. The
// balance is set near the limit by hand: reaching it with credits of at most
// store.MaxAmount would take thousands of them.
func TestLedgerCreditOverflow(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "llm4agents.db")
	db := open(t, path, nil)
	const owner, asset = "0xabc", "eip155:1/erc20:0xa0b8"
	if _, err := db.Credit(ctx, "c1", owner, asset, 1000); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Hold(ctx, store.HoldRequest{ID: "h1", Owner: owner, Asset: asset, Amount: 400, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// user 600, held 400: lift user so that user + held = MaxInt64 - 10.
	if _, err := raw(t, path).ExecContext(ctx, `UPDATE ledger_balances SET balance = ? WHERE account = ?`,
		int64(math.MaxInt64-10-400), store.UserAccount(owner)); err != nil {
		t.Fatal(err)
	}
	_, err := db.Credit(ctx, "c2", owner, asset, 11)
	if err == nil || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrInsufficient) {
		t.Fatalf("Credit() past int64 = %v, want an error that is no sentinel", err)
	}
	if _, err := db.Credit(ctx, "c2", owner, asset, 10); err != nil {
		t.Fatalf("Credit() to exactly int64's maximum: %v", err)
	}
	// The release of the hold now brings user to exactly MaxInt64.
	_, e, err := db.Release(ctx, "h1")
	if err != nil {
		t.Fatalf("Release(): %v", err)
	}
	if got := e.Postings[1]; got.Account != store.UserAccount(owner) || got.BalanceAfter != math.MaxInt64 {
		t.Errorf("release posting = %+v, want the user balance at MaxInt64", got)
	}
}

// Crash test (D21): processes running random ledger operations on
// one database file are killed with SIGKILL at random moments, so that a
// batch of writes is cut off anywhere, even inside its transaction; then the
// books must still balance, every operation must have been applied once or
// not at all, and a recovering process must be able to finish the work.

// crashChildEnv, when set to "path seed", makes TestLedgerCrashChild run the
// crash workload on the database at path.
const crashChildEnv = "LLM4AGENTS_TEST_LEDGER_CRASH_CHILD"

// crashIntentsEnv names the file the child appends its intents to.
const crashIntentsEnv = "LLM4AGENTS_TEST_LEDGER_CRASH_INTENTS"

// TestLedgerCrashChild is the process TestLedgerCrash kills; it does nothing
// in a normal run.
func TestLedgerCrashChild(t *testing.T) {
	arg := os.Getenv(crashChildEnv)
	if arg == "" {
		t.Skip("only run as the child of TestLedgerCrash")
	}
	path, seedText, _ := strings.Cut(arg, " ")
	seed, err := strconv.ParseUint(seedText, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(os.Getenv(crashIntentsEnv), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sqlite.Open(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("child running") // the parent starts its timer on this line
	// Runs until killed; the deadline only stops a child whose parent died.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := storetest.RunLedgerCrashWorkload(ctx, db, seed, 8, f); err != nil {
		t.Fatal(err)
	}
}

// TestLedgerCrash kills five workload processes in a row, each at a random
// moment, on one file, then checks what they left.
func TestLedgerCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills processes")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "llm4agents.db")
	intents := filepath.Join(dir, "intents.jsonl")
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	for run := range 5 {
		seed := uint64(run + 1)
		delay := time.Duration(50+r.IntN(400)) * time.Millisecond
		killChild(t, path, intents, seed, delay)
	}
	clk := &testClock{now: time.Now().Truncate(time.Millisecond)}
	db := open(t, path, clk.Now)
	data, err := os.ReadFile(intents)
	if err != nil {
		t.Fatal(err)
	}
	storetest.CheckLedgerAfterCrash(t, db, clk.Advance, data)
}

// killChild starts the workload process on path and kills it delay after it
// says it runs.
func killChild(t *testing.T, path, intents string, seed uint64, delay time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestLedgerCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d", crashChildEnv, path, seed), crashIntentsEnv+"="+intents)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := stdout.Read(buf)
	if err != nil || !strings.Contains(string(buf[:n]), "child running") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child %d did not start: %q %v; stderr: %s", seed, buf[:n], err, stderr.String())
	}
	time.Sleep(delay)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		out, _ := stdout.Read(buf)
		t.Fatalf("child %d ended with %v before it was killed; stdout %q stderr: %s", seed, err, buf[:out], stderr.String())
	}
	t.Logf("child %d killed after %v", seed, delay)
}
