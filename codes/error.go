package codes

import "fmt"

// Error is an error as it leaves a process: its code, and a message for
// the person who reads it. An HTTP handler answers it with the code's
// status and a body of both (rfcs/0007 §Error codes).
type Error struct {
	Code    Code
	Message string
	// HTTP is the status answered when it is not the code's (0: the
	// registry's, HTTPStatus).
	HTTP int
}

// Errorf is an Error with code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Status is the HTTP status the error is answered with.
func (e *Error) Status() int {
	if e.HTTP != 0 {
		return e.HTTP
	}
	return HTTPStatus(e.Code)
}
