package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/filter"
)

// apiError is an error answered to the client: an HTTP status and the body
// {"error": {"code": ..., "message": ...}}.
type apiError struct {
	status  int
	code    string
	message string
	// err is the cause, logged for server errors; never sent.
	err error
}

func (e *apiError) Error() string { return e.message }
func (e *apiError) Unwrap() error { return e.err }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

// errorBody is the JSON of every error response.
type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// filterFlags are the flags of `tandem serve` that set each filter limit
// (engine.Options.FilterLimits), by filter.Error.Limit.
var filterFlags = map[string]string{filter.LimitClauses: "--max-filter-clauses", filter.LimitDepth: "--max-filter-depth"}

// classify maps an engine error to its answer: the client's mistakes are
// 4xx with the engine's message (which names the field, the filter path,
// the model or the parameter), the rest 500.
func classify(err error) *apiError {
	var ae *apiError
	var fe *filter.Error
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{status: http.StatusGatewayTimeout, code: "timeout", message: "the request ran out of time: " + err.Error(), err: err}
	case errors.Is(err, context.Canceled):
		return &apiError{status: http.StatusServiceUnavailable, code: "canceled", message: "the request was canceled", err: err}
	case errors.Is(err, engine.ErrClosed):
		return &apiError{status: http.StatusServiceUnavailable, code: "unavailable", message: "the collection is closing", err: err}
	case errors.As(err, &fe) && fe.Limit != "":
		return &apiError{status: http.StatusBadRequest, code: "filter_too_large", message: fmt.Sprintf("%v (%s)", err, filterFlags[fe.Limit]), err: err}
	case errors.Is(err, filter.ErrInvalid):
		return &apiError{status: http.StatusBadRequest, code: "invalid_filter", message: err.Error(), err: err}
	case errors.Is(err, engine.ErrUnknownRetriever):
		return &apiError{status: http.StatusBadRequest, code: "unknown_retriever", message: err.Error(), err: err}
	case errors.Is(err, tandem.ErrBadVectors):
		return &apiError{status: http.StatusBadRequest, code: "bad_vectors", message: err.Error(), err: err}
	case errors.Is(err, engine.ErrModel):
		return &apiError{status: http.StatusBadRequest, code: "bad_model", message: err.Error(), err: err}
	case errors.Is(err, engine.ErrBadBackup):
		return &apiError{status: http.StatusBadRequest, code: "bad_backup", message: err.Error(), err: err}
	case errors.Is(err, engine.ErrBadRequest):
		return &apiError{status: http.StatusBadRequest, code: "bad_request", message: err.Error(), err: err}
	case errors.Is(err, errors.ErrUnsupported):
		return &apiError{status: http.StatusNotImplemented, code: "unsupported", message: err.Error(), err: err}
	}
	return &apiError{status: http.StatusInternalServerError, code: "internal", message: err.Error(), err: err}
}

// fail answers err; a request that ran out of time says which limit.
func (s *Server) fail(w http.ResponseWriter, err error) {
	if errors.Is(err, context.DeadlineExceeded) {
		err = &apiError{status: http.StatusGatewayTimeout, code: "timeout",
			message: fmt.Sprintf("the request took longer than the limit of %s (--timeout)", s.cfg.Timeout), err: err}
	}
	writeError(w, err)
}

// writeError answers err; the status is recorded for the request log.
func writeError(w http.ResponseWriter, err error) {
	ae := classify(err)
	if sw, ok := w.(*statusWriter); ok && ae.status >= 500 {
		sw.err = err
	}
	var b errorBody
	b.Error.Code, b.Error.Message = ae.code, ae.message
	writeJSON(w, ae.status, b)
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		data = []byte(`{"error":{"code":"internal","message":"encoding the response failed"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(data)+1))
	w.WriteHeader(status)
	w.Write(append(data, '\n'))
}
