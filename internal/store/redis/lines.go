package redis

import (
	"context"

	goredis "github.com/redis/go-redis/v9"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/lines"
)

// Claims go on lines (package lines): the claims that arrive while one is
// in flight are sent together as one pipeline, one write and one read on
// the connection for the lot, instead of each waiting for a connection and
// a round trip of its own. Each script in a pipeline still runs atomically
// and alone, so a pipeline decides exactly what the same scripts sent one
// by one would; only the system calls and wake-ups are shared. A claim
// once sent runs to its end, bounded by store.DefaultTimeout, even if its
// caller's context ends meanwhile, so its outcome is known when the call
// returns; one still queued when its context ends is withdrawn unsent.

const (
	// claimLines is how many lines of claims each DB has; a claim goes to
	// the line its key hashes to. Two measured best for 32 concurrent
	// callers on two cores (docs/BENCHMARKS.md).
	claimLines = 2
	// maxBatch bounds the scripts of one pipeline.
	maxBatch = 64
)

// scriptCall is one script run sent on a line, and its reply.
type scriptCall struct {
	script *goredis.Script
	keys   []string
	args   []any

	reply any
	err   error
}

// newLines returns the lines of db's claims.
func newLines(db *DB) *lines.Set[*scriptCall] {
	return &lines.Set[*scriptCall]{Send: db.send, Max: maxBatch}
}

// claimLine names the line of the claims of key.
func claimLine(key string) string {
	return lines.ByKey("", key, claimLines)
}

// send runs batch: one script as one call, several as one pipeline of
// EVALSHA. A script the server does not have (NOSCRIPT: it was restarted
// or flushed since Open loaded them) did not run, and is sent again with
// its body.
func (db *DB) send(ctx context.Context, batch []*scriptCall) {
	ctx, cancel := context.WithTimeout(ctx, store.DefaultTimeout)
	defer cancel()
	if len(batch) == 1 {
		c := batch[0]
		c.reply, c.err = c.script.Run(ctx, db.client, c.keys, c.args...).Result()
		return
	}
	cmds := make([]*goredis.Cmd, len(batch))
	_, _ = db.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, c := range batch {
			cmds[i] = c.script.EvalSha(ctx, p, c.keys, c.args...)
		}
		return nil
	})
	for i, c := range batch {
		c.reply, c.err = cmds[i].Result()
		if c.err != nil && goredis.HasErrorPrefix(c.err, "NOSCRIPT") {
			c.reply, c.err = c.script.Eval(ctx, db.client, c.keys, c.args...).Result()
		}
	}
}

// claim runs a claim script for key on key's line, as run does otherwise:
// within ctx's deadline or store.DefaultTimeout while it waits in the line,
// and within store.DefaultTimeout once sent.
func (db *DB) claim(ctx context.Context, key string, s *goredis.Script, keys []string, args ...any) (string, []any, error) {
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return "", nil, err
	}
	defer cancel()
	c := &scriptCall{script: s, keys: keys, args: args}
	if err := db.lines.Write(ctx, claimLine(key), c); err != nil {
		return "", nil, db.mapErr(ctx, err)
	}
	return db.reply(ctx, c.reply, c.err)
}
