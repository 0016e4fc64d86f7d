package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// errEventTooLarge: an event's data, or any single line, is over the cap.
var errEventTooLarge = errors.New("server-sent event over the size limit")

// sseReader reads server-sent events (the WHATWG event-stream format) and
// returns the data of each. It follows the specification with one leniency:
//
//   - Lines end with CRLF, LF or a lone CR; a leading UTF-8 BOM is skipped.
//   - A line starting with ':' is a comment and is ignored.
//   - "data" lines append their value (after one optional space) to the event's
//     data, joined with LF; "event", "id", "retry" and unknown fields are
//     ignored, since chat completions carry everything in data.
//   - A blank line ends the event. An event with no data line is not returned;
//     one whose data is empty ("data:") is returned empty.
//   - Leniency: at the end of the input, an event that was not ended by a blank
//     line is still returned (the specification discards it), so a server that
//     closes right after "data: [DONE]\n" is read correctly. A truncated JSON
//     chunk then fails to parse, which the caller reports.
//
// limit bounds the data of one event and the length of any line; a larger one
// fails with errEventTooLarge. The reader is not safe for concurrent use.
type sseReader struct {
	sc      *bufio.Scanner
	limit   int
	data    []byte // data lines of the current event, each followed by LF
	started bool   // past the first line (BOM check)
	eof     bool
}

// lineSlack is what a line may hold beyond an event's data cap: the "data: "
// field name and a CR.
const lineSlack = 16

func newSSEReader(r io.Reader, limit int) *sseReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, min(4096, limit+lineSlack)), limit+lineSlack)
	sc.Split(scanLines)
	return &sseReader{sc: sc, limit: limit}
}

// next returns the data of the next event, in a new slice. It returns io.EOF at
// the end of the input, after the last event.
func (r *sseReader) next() ([]byte, error) {
	for !r.eof {
		if !r.sc.Scan() {
			r.eof = true
			if err := r.sc.Err(); err != nil {
				if errors.Is(err, bufio.ErrTooLong) {
					return nil, errEventTooLarge
				}
				return nil, err
			}
			break
		}
		line := r.sc.Bytes()
		if !r.started {
			r.started = true
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
		}
		if len(line) == 0 {
			if ev, ok := r.dispatch(); ok {
				return ev, nil
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		if string(field) != "data" {
			continue // event, id, retry and unknown fields
		}
		if len(r.data)+len(value) > r.limit {
			return nil, errEventTooLarge
		}
		r.data = append(r.data, value...)
		r.data = append(r.data, '\n')
	}
	if ev, ok := r.dispatch(); ok {
		return ev, nil
	}
	return nil, io.EOF
}

// dispatch returns the pending event's data, if it had any data line, and
// starts a new event.
func (r *sseReader) dispatch() ([]byte, bool) {
	if len(r.data) == 0 {
		return nil, false
	}
	ev := bytes.Clone(r.data[:len(r.data)-1])
	if ev == nil {
		ev = []byte{}
	}
	r.data = r.data[:0]
	return ev, true
}

// scanLines is a bufio.SplitFunc for event-stream lines: it splits on CRLF, LF
// or a lone CR. A CR at the end of the buffered data waits for the next byte, to
// tell CRLF from CR.
func scanLines(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if atEOF && len(data) == 0 {
		return 0, nil, nil
	}
	nl := bytes.IndexByte(data, '\n')
	var cr int
	if nl >= 0 {
		cr = bytes.IndexByte(data[:nl], '\r')
	} else {
		cr = bytes.IndexByte(data, '\r')
	}
	switch {
	case cr >= 0 && cr+1 < len(data):
		if data[cr+1] == '\n' {
			return cr + 2, data[:cr], nil
		}
		return cr + 1, data[:cr], nil
	case cr >= 0 && atEOF:
		return cr + 1, data[:cr], nil
	case cr >= 0:
		return 0, nil, nil // need the next byte: CRLF or a lone CR?
	case nl >= 0:
		return nl + 1, data[:nl], nil
	case atEOF:
		return len(data), data, nil
	}
	return 0, nil, nil
}
