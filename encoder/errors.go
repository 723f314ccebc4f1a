package encoder

import "errors"

// Sentinel errors. Errors returned by this package wrap one of them with
// the file, field, text index or dimension involved.
var (
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("encoder: closed")
	// ErrNoConfig means the model directory has no tandem.json.
	ErrNoConfig = errors.New("encoder: no configuration file")
	// ErrBadConfig means tandem.json is malformed or contradicts itself.
	ErrBadConfig = errors.New("encoder: bad configuration")
	// ErrMissingFile means a file the configuration names does not exist.
	ErrMissingFile = errors.New("encoder: missing file")
	// ErrModelMismatch means the configuration contradicts the model's
	// inputs or outputs, or the tokenizer's vocabulary.
	ErrModelMismatch = errors.New("encoder: configuration does not match the model")
	// ErrBadText means an input text is invalid UTF-8 or too large.
	ErrBadText = errors.New("encoder: bad text")
	// ErrDimMismatch means a model's vectors do not fit an existing index.
	ErrDimMismatch = errors.New("encoder: dimension mismatch")
	// ErrNoTokens means token output was asked of a model that only
	// produces pooled vectors.
	ErrNoTokens = errors.New("encoder: model has no token output")
)
