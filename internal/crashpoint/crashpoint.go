// Package crashpoint makes a process die at a named point of the paid path, so
// that crash tests are deterministic and repeatable (docs/DESIGN.md D21).
//
// A point is armed by the environment variable LLM4AGENTS_CRASHPOINT, read
// once when the process starts. When the code reaches the armed point, Hit
// writes one line naming it to stderr and exits at once with ExitCode: no
// deferred function runs, no buffer is flushed, no store write or answer
// follows, as if the process had been killed there. With the variable unset
// (every production process) Hit is one comparison of an empty string.
//
// The points, in the order a paid request reaches them:
//
//	after-claim      the gateway won the claim on the authorization; nothing else happened
//	after-upstream   the gateway holds the upstream's answer (a stream: its first content chunk); nothing settled
//	after-broadcast  the facilitator sent the settlement transaction, recorded (hash and bytes) before it went out; not mined
//	after-receipt    the facilitator read the successful receipt; "settled" is not recorded
//	after-record     the facilitator recorded "settled"; nobody was answered
package crashpoint

import (
	"fmt"
	"os"
	"strings"
)

// Point names a place in the code where a process may be made to crash.
type Point string

// The crash points of D21.
const (
	AfterClaim     Point = "after-claim"
	AfterUpstream  Point = "after-upstream"
	AfterBroadcast Point = "after-broadcast"
	AfterReceipt   Point = "after-receipt"
	AfterRecord    Point = "after-record"
)

// EnvVar is the environment variable that arms a crash point.
const EnvVar = "LLM4AGENTS_CRASHPOINT"

// ExitCode is the exit status of a process that reached its armed point: an
// unusual one, so that a test tells it from a panic (2), a failed start (1)
// or a kill (a signal, no status).
const ExitCode = 86

// points lists every Point, in the order a paid request reaches them.
var points = []Point{AfterClaim, AfterUpstream, AfterBroadcast, AfterReceipt, AfterRecord}

// Points returns every crash point, in the order a paid request reaches them.
func Points() []Point { return append([]Point(nil), points...) }

// armed is the value of EnvVar when the process started. It is only read
// afterwards, so Hit needs no synchronization.
var armed = os.Getenv(EnvVar)

// Hit exits the process with ExitCode if p is the armed point, and returns at
// once otherwise. It is small enough to be inlined: unarmed, it costs one
// comparison.
func Hit(p Point) {
	if armed != "" {
		hit(p)
	}
}

func hit(p Point) {
	if Point(armed) != p {
		return
	}
	// One write, unbuffered: stderr is the only trace the test reads.
	_, _ = fmt.Fprintf(os.Stderr, "llm4agents: crash point %s reached (%s): exiting with status %d\n", p, EnvVar, ExitCode)
	os.Exit(ExitCode)
}

// Armed returns the armed point, if EnvVar names one. A command logs it at
// start, so that a process set up to crash says so.
func Armed() (Point, bool) {
	p, err := Parse(armed)
	return p, err == nil && p != ""
}

// Validate reports an EnvVar that is set but names no crash point: a typo
// would otherwise make a crash test pass without ever crashing. A command
// calls it before it starts serving. An unset or empty variable is valid.
func Validate() error {
	if _, err := Parse(armed); err != nil {
		return fmt.Errorf("%s: %w", EnvVar, err)
	}
	return nil
}

// Parse returns the Point named s; "" is no point and no error. Any other
// name is an error that lists the valid ones.
func Parse(s string) (Point, error) {
	if s == "" {
		return "", nil
	}
	for _, p := range points {
		if string(p) == s {
			return p, nil
		}
	}
	names := make([]string, len(points))
	for i, p := range points {
		names[i] = string(p)
	}
	const maxEcho = 40 // the value is not a secret, but need not be echoed whole
	shown := s
	if r := []rune(s); len(r) > maxEcho {
		shown = string(r[:maxEcho]) + "..."
	}
	return "", fmt.Errorf("%q is not a crash point (want one of %s)", shown, strings.Join(names, ", "))
}
