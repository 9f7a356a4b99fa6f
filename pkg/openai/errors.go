package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// Error types, as OpenAI names them in the "type" field.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeAuthentication = "authentication_error"
	TypePermission     = "permission_error"
	TypeNotFound       = "not_found_error"
	TypeRateLimit      = "rate_limit_error"
	TypeServer         = "server_error"
	TypeOverloaded     = "overloaded_error"
)

// Error is an error that knows its HTTP status and OpenAI shape.
type Error struct {
	Status  int    `json:"-"`
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   string `json:"param,omitempty"`
	Code    string `json:"code,omitempty"`
	// RetryAfter, when positive, is sent as the Retry-After header (seconds).
	RetryAfter int `json:"-"`
}

// Error returns the message.
func (e *Error) Error() string { return e.Message }

// BadRequest is a 400 invalid_request_error about param (may be empty).
func BadRequest(param, code, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: param, Code: code, Message: fmt.Sprintf(format, args...)}
}

// NotFound is a 404 for an unknown route or object.
func NotFound(format string, args ...any) *Error {
	return &Error{Status: http.StatusNotFound, Type: TypeNotFound, Code: "not_found", Message: fmt.Sprintf(format, args...)}
}

// MethodNotAllowed is a 405 naming the allowed method.
func MethodNotAllowed(method, allowed string) *Error {
	return &Error{Status: http.StatusMethodNotAllowed, Type: TypeInvalidRequest, Code: "method_not_allowed",
		Message: fmt.Sprintf("method %s not allowed; use %s", method, allowed)}
}

// TooLarge is a 413 for a body over limit bytes.
func TooLarge(limit int64) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Type: TypeInvalidRequest, Code: "request_too_large",
		Message: fmt.Sprintf("request body exceeds the limit of %d bytes", limit)}
}

// RateLimited is a 429 the client may retry after retryAfter seconds.
func RateLimited(code, msg string, retryAfter int) *Error {
	return &Error{Status: http.StatusTooManyRequests, Type: TypeRateLimit, Code: code, Message: msg, RetryAfter: retryAfter}
}

// Unavailable is a 503 overloaded_error.
func Unavailable(code, msg string) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: TypeOverloaded, Code: code, Message: msg}
}

// Internal is a 500 server_error. The message must not carry internals a
// client should not see.
func Internal(msg string) *Error {
	return &Error{Status: http.StatusInternalServerError, Type: TypeServer, Code: "internal_error", Message: msg}
}

// WriteError writes e as the response. A nil e writes nothing.
func WriteError(w http.ResponseWriter, e *Error) {
	if e == nil {
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	w.WriteHeader(e.Status)
	b, _ := json.Marshal(struct {
		Error *Error `json:"error"`
	}{e})
	_, _ = w.Write(append(b, '\n'))
}

// ReadBody reads at most limit bytes of r's body. A larger body gives a 413
// Error, a read failure a 400.
//
// A body whose length the request declares within the limit is read into
// one buffer of exactly that length: io.ReadAll starts at 512 bytes and
// grows by appending, which for a 32 KiB prompt is more than a dozen
// allocations and copies, several times the body in garbage, on every
// request (and more reads from the connection). The server ends the body at
// its declared length and reports a body that ends early as an error, so
// the declared bytes are all there is.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *Error) {
	if n := r.ContentLength; n > 0 && n <= limit {
		body := make([]byte, n)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			return nil, BadRequest("", "body_read_error", "reading request body: %v", err)
		}
		return body, nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, TooLarge(limit)
		}
		return nil, BadRequest("", "body_read_error", "reading request body: %v", err)
	}
	return body, nil
}

// DecodeJSON unmarshals body into v, turning syntax and type errors into a
// 400 that names the offending field where the decoder knows it.
func DecodeJSON(body []byte, v any) *Error {
	if len(body) == 0 {
		return BadRequest("", "invalid_json", "request body is empty; expected a JSON object")
	}
	if err := json.Unmarshal(body, v); err != nil {
		var ute *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &ute):
			kind := "of another type"
			if ute.Type != nil {
				kind = jsonKind(ute.Type.Kind().String())
			}
			return BadRequest(ute.Field, "invalid_type", "field %q must be %s, not a JSON %s", ute.Field, kind, ute.Value)
		case errors.As(err, &se):
			return BadRequest("", "invalid_json", "request body is not valid JSON (offset %d): %v", se.Offset, err)
		default:
			return BadRequest("", "invalid_json", "request body is not valid JSON: %v", err)
		}
	}
	return nil
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "int", "int32", "int64", "uint", "uint32", "uint64", "float32", "float64":
		return "a number"
	case "slice", "array":
		return "an array"
	case "struct", "map", "ptr", "interface":
		return "an object"
	default:
		return "of another type"
	}
}
