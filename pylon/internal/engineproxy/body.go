package engineproxy

import (
	"bytes"
	"io"
	"math/bits"
	"sync"
	"sync/atomic"
)

// A request body is read whole (it is checked, and replayed on a retry),
// so every request used to allocate its size again: 256 KiB a request at
// the larger benchmark size, most of the pylon's garbage there. Bodies of
// a declared length above maxUnpooledBody, up to maxPooledBody, are read
// into buffers recycled by size class instead; classes are powers of two.
//
// A short body is not pooled: the HTTP/1 transport writes the head and an
// in-memory body (a *bytes.Reader, as http.NewRequest makes) in one
// write, but flushes the head on its own before any other body, which
// would cost a pooled short body a write syscall per request. A body
// longer than the transport's 4 KiB write buffer takes two writes either
// way.
const (
	maxUnpooledBody = 4 << 10
	minPooledShift  = 13 // 8 KiB, the first class above maxUnpooledBody
	maxPooledShift  = 20 // 1 MiB: larger bodies are rare enough to allocate
	maxPooledBody   = 1 << maxPooledShift
)

// bodyPools holds one pool of *bodyBuffer per size class.
var bodyPools [maxPooledShift - minPooledShift + 1]sync.Pool

// requestBody is a request body read whole: b, held by buf when it is in a
// pooled buffer. It is passed by value; the handler releases it once.
type requestBody struct {
	b   []byte
	buf *bodyBuffer // nil: b is not pooled
}

// release drops the handler's reference to a pooled buffer.
func (rb requestBody) release() {
	if rb.buf != nil {
		rb.buf.release()
	}
}

// reader returns a reader of the body for one upstream request, which the
// transport closes; getBody returns the same for the transport to send
// the body again on a new connection.
func (rb requestBody) reader() io.ReadCloser {
	if rb.buf == nil {
		return io.NopCloser(bytes.NewReader(rb.b)) // as http.NewRequest does
	}
	return rb.buf.reader()
}

func (rb requestBody) getBody() func() (io.ReadCloser, error) {
	if rb.buf == nil {
		return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(rb.b)), nil }
	}
	return rb.buf.getBody
}

// bodyBuffer is a request body held in a pooled buffer. The handler
// holds one reference and every reader handed to the engine's
// transport holds one more, released when the transport closes it: an
// HTTP/1 transport may still be writing the body after the answer's head
// has arrived, even after the handler has returned, so the buffer goes
// back to its pool only when the last holder lets go. A reader the
// transport never closes only keeps the buffer from being reused.
type bodyBuffer struct {
	b     []byte
	class int // index into bodyPools
	refs  atomic.Int32
}

// classOf is the pool class of a buffer of at least n bytes, or -1 when
// such a buffer is not pooled.
func classOf(n int64) int {
	if n <= maxUnpooledBody || n > maxPooledBody {
		return -1
	}
	shift := bits.Len64(uint64(n - 1)) // the smallest power of two >= n
	return max(shift, minPooledShift) - minPooledShift
}

// readBody is io.ReadAll with a first buffer sized for a declared length
// (bounded by limit, and pooled above maxUnpooledBody), so a body is read
// without growing the buffer two or three times; the extra byte lets the
// read that sees EOF find room.
func readBody(r io.Reader, declared, limit int64) (requestBody, error) {
	size := int64(512) // io.ReadAll's first buffer
	if declared > 0 && declared < limit {
		size = declared + 1
	}
	var bb *bodyBuffer
	var b []byte
	if c := classOf(size); c >= 0 {
		bb, _ = bodyPools[c].Get().(*bodyBuffer)
		if bb == nil {
			bb = &bodyBuffer{b: make([]byte, 0, 1<<(c+minPooledShift)), class: c}
		}
		bb.refs.Store(1)
		b = bb.b[:0]
	} else {
		b = make([]byte, 0, size)
	}
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			if err != io.EOF {
				if bb != nil {
					bb.release()
				}
				return requestBody{}, err
			}
			if bb == nil {
				return requestBody{b: b}, nil
			}
			if cap(b) != cap(bb.b) {
				// Grown past its class into a new array: the pooled
				// one goes back now, the body is not pooled.
				bb.release()
				return requestBody{b: b}, nil
			}
			bb.b = b
			return requestBody{b: b, buf: bb}, nil
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // let append pick the growth
		}
	}
}

// release drops one reference; the last one returns the buffer to its
// pool.
func (bb *bodyBuffer) release() {
	if bb.refs.Add(-1) != 0 {
		return
	}
	bb.b = bb.b[:0]
	bodyPools[bb.class].Put(bb)
}

// reader returns a reader of the body that holds a reference until it is
// closed.
func (bb *bodyBuffer) reader() io.ReadCloser {
	bb.refs.Add(1)
	br := &bodyReader{bb: bb}
	br.Reset(bb.b)
	return br
}

// getBody is the upstream request's GetBody: the transport calls it to
// send the body again on a new connection.
func (bb *bodyBuffer) getBody() (io.ReadCloser, error) { return bb.reader(), nil }

// bodyReader reads a bodyBuffer and releases its reference on the first
// Close.
type bodyReader struct {
	bytes.Reader
	bb     *bodyBuffer
	closed atomic.Bool
}

func (br *bodyReader) Close() error {
	if br.closed.CompareAndSwap(false, true) {
		br.bb.release()
	}
	return nil
}
