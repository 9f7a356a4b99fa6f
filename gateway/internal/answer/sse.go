package answer

import (
	"bufio"
	"bytes"
	"errors"
	"io"
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
}

// NewEventReader reads events from r.
func NewEventReader(r io.Reader) *EventReader {
	return &EventReader{br: bufio.NewReaderSize(r, 32<<10)}
}

// Next returns the next event. At the end of the body it returns io.EOF;
// a final event without its blank line is still returned first. Comment
// lines are kept in Raw (relayed) but carry no data.
func (r *EventReader) Next() (*Event, error) {
	ev := &Event{}
	var data [][]byte
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
			ev.Raw = append(ev.Raw, line...)
			content := bytes.TrimRight(line, "\r\n")
			switch {
			case len(content) == 0:
				if len(ev.Raw) > len(line) || len(data) > 0 {
					ev.Data = bytes.Join(data, []byte("\n"))
					return ev, nil
				}
				ev.Raw = ev.Raw[:0] // stray blank line between events
				continue
			case bytes.HasPrefix(content, []byte("data:")):
				data = append(data, bytes.TrimPrefix(bytes.TrimPrefix(content, []byte("data:")), []byte(" ")))
			case bytes.HasPrefix(content, []byte("event:")):
				ev.Type = string(bytes.TrimSpace(bytes.TrimPrefix(content, []byte("event:"))))
			}
		}
		if err != nil {
			if len(ev.Raw) > 0 && errors.Is(err, io.EOF) {
				ev.Data = bytes.Join(data, []byte("\n"))
				return ev, nil
			}
			return nil, err
		}
	}
}
