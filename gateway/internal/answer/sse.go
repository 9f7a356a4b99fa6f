package answer

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"sync"
)

// MaxEventBytes caps one SSE event; the hub is trusted, but a runaway
// event must not take the gateway's memory with it. Upstream Stargate's
// gateway caps a line at 4 MiB; 16 MiB leaves a large tool-call chunk
// room to spare.
const MaxEventBytes = 16 << 20

// ErrEventTooLarge is returned for an event over MaxEventBytes.
var ErrEventTooLarge = errors.New("sse event exceeds 16 MiB")

// Event is one SSE event.
type Event struct {
	// Raw is the event as received, including its terminating blank line,
	// for byte-exact relaying.
	Raw []byte
	// Data is the event's data lines joined with '\n' (leading space
	// after "data:" removed).
	Data []byte
	// Type is the event: field, if any.
	Type string
}

// Done reports whether the event is the [DONE] sentinel.
func (e *Event) Done() bool { return bytes.Equal(e.Data, []byte("[DONE]")) }

// EventReader splits an SSE body into events.
type EventReader struct {
	br *bufio.Reader
	// ev, and the storage of its Raw and Data, are reused by every Next:
	// a stream's events cost no allocation each.
	ev    Event
	spans []span
	data  []byte
}

// readers recycles the readers' 32 KiB buffers, which would otherwise be
// allocated (and cleared) for every answer.
var readers sync.Pool

// NewEventReader reads events from r. Release gives its buffer back.
func NewEventReader(r io.Reader) *EventReader {
	br, _ := readers.Get().(*bufio.Reader)
	if br == nil {
		br = bufio.NewReaderSize(r, 32<<10)
	} else {
		br.Reset(r)
	}
	return &EventReader{br: br}
}

// Release returns the reader's buffer for reuse; the reader and the last
// event it returned must not be used after it.
func (r *EventReader) Release() {
	if r.br != nil {
		r.br.Reset(nil)
		readers.Put(r.br)
		r.br = nil
	}
}

// Next returns the next event. At the end of the body it returns io.EOF;
// a final event without its blank line is still returned first. Comment
// lines are kept in Raw (relayed) but carry no data. The event, its Raw
// and its Data are valid until the next call: a caller keeps a copy of
// what it keeps.
//
// The data lines are kept as offsets into Raw, which holds a copy of
// every line: the lines ReadSlice returns point into the reader's buffer,
// which the next read overwrites when the rest of the event arrives in a
// later read (found by FuzzEventReader: a data line and its blank line
// delivered apart came out as other bytes).
func (r *EventReader) Next() (*Event, error) {
	ev := &r.ev
	*ev = Event{Raw: ev.Raw[:0]}
	data := r.spans[:0]
	defer func() { r.spans = data[:0] }()
	for {
		line, err := r.br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// Long line: accumulate it whole.
			buf := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				if len(buf)+len(ev.Raw) > MaxEventBytes {
					return nil, ErrEventTooLarge
				}
				line, err = r.br.ReadSlice('\n')
				buf = append(buf, line...)
			}
			line = buf
		}
		if len(line) > 0 {
			if len(ev.Raw)+len(line) > MaxEventBytes {
				return nil, ErrEventTooLarge
			}
			start := len(ev.Raw)
			ev.Raw = append(ev.Raw, line...)
			content := bytes.TrimRight(line, "\r\n")
			switch {
			case len(content) == 0:
				if start > 0 || len(data) > 0 {
					ev.Data = r.joinData(ev.Raw, data)
					return ev, nil
				}
				ev.Raw = ev.Raw[:0] // stray blank line between events
				continue
			case bytes.HasPrefix(content, []byte("data:")):
				v := bytes.TrimPrefix(bytes.TrimPrefix(content, []byte("data:")), []byte(" "))
				end := start + len(content)
				data = append(data, span{end - len(v), end})
			case bytes.HasPrefix(content, []byte("event:")):
				ev.Type = string(bytes.TrimSpace(bytes.TrimPrefix(content, []byte("event:"))))
			}
		}
		if err != nil {
			if len(ev.Raw) > 0 && errors.Is(err, io.EOF) {
				ev.Data = r.joinData(ev.Raw, data)
				return ev, nil
			}
			return nil, err
		}
	}
}

// Buffered reports whether the next event is already whole in the
// reader's buffer, so that Next returns it without reading. A writer
// relaying events flushes when it is false: everything that has arrived
// is then written, and nothing waits for bytes that have not. It knows
// only lines ended by LF (or CRLF), as every engine and hub writes them:
// for an event with lines ended by a lone CR it says false, which costs a
// flush, never an event.
func (r *EventReader) Buffered() bool {
	b, _ := r.br.Peek(r.br.Buffered())
	started := false
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return false
		}
		if len(bytes.TrimRight(b[:i], "\r")) == 0 {
			if started {
				return true
			}
		} else {
			started = true
		}
		b = b[i+1:]
	}
}

// span is a data line's value as offsets into an event's Raw.
type span struct{ start, end int }

// joinData joins the data values at spans of raw with '\n'.
func (r *EventReader) joinData(raw []byte, spans []span) []byte {
	switch len(spans) {
	case 0:
		return nil
	case 1:
		return raw[spans[0].start:spans[0].end:spans[0].end]
	}
	out := r.data[:0]
	for i, s := range spans {
		if i > 0 {
			out = append(out, '\n')
		}
		out = append(out, raw[s.start:s.end]...)
	}
	r.data = out
	return out[:len(out):len(out)]
}
