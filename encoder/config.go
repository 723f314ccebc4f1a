package encoder

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// ConfigFile is the name of the encoder configuration that lives beside
// model.onnx.
const ConfigFile = "tandem.json"

// Default maximum lengths, in tokens including special tokens.
const (
	DefaultQueryMaxLength    = 64
	DefaultDocumentMaxLength = 512
)

// Pooling says how one vector is made from a model's output.
type Pooling string

const (
	// PoolCLS takes the first token's vector (TAS-B, BGE).
	PoolCLS Pooling = "cls"
	// PoolMean averages the vectors of attended tokens (GTR, MiniLM).
	PoolMean Pooling = "mean"
	// PoolNone produces token vectors only (ColBERT, ReAtt).
	PoolNone Pooling = "none"
	// PoolModel uses a model output that is already pooled, shape
	// [batch, dim] (e.g. a "sentence_embedding" output).
	PoolModel Pooling = "model"
)

// Similarity is the score a model was trained with.
type Similarity string

const (
	Dot    Similarity = "dot"
	Cosine Similarity = "cosine"
)

// Precision is the number format of a model's weights. It is
// informational: ONNX Runtime runs whatever the graph holds, and Tandem
// feeds and reads the same tensors either way.
type Precision string

const (
	// Float32 is a full-precision export.
	Float32 Precision = "float32"
	// Int8 is a quantised model: int8 weights, and usually activations
	// quantised per tensor at run time, so that a text's vector would
	// depend slightly on the other texts in its batch; the encoder runs
	// such a model one text at a time by default (Options.BatchSize).
	Int8 Precision = "int8"
)

// Config is the content of tandem.json. Zero fields mean defaults; see
// docs/models.md for the format and one example per model family.
type Config struct {
	// Name identifies the model; it defaults to the directory name.
	Name string `json:"name,omitempty"`
	// Model is the ONNX file, relative to the directory; default model.onnx.
	Model string `json:"model,omitempty"`
	// Tokenizer is the Hugging Face tokenizer.json file; default
	// tokenizer.json.
	Tokenizer string `json:"tokenizer,omitempty"`
	// Output is the model output to read. By default the model's only
	// output, or last_hidden_state when there are several.
	Output string `json:"output,omitempty"`
	// Pooling is cls, mean, none or model.
	Pooling Pooling `json:"pooling"`
	// Normalize scales pooled and token vectors to unit length, after any
	// projection. Zero vectors stay zero.
	Normalize bool `json:"normalize,omitempty"`
	// Similarity is dot or cosine; it tells indexes how to score.
	Similarity Similarity `json:"similarity"`
	// Projection is an optional linear map applied to every output vector,
	// shared by both sides unless a side has its own.
	Projection *Projection `json:"projection,omitempty"`
	// Query and Document configure each side.
	Query    SideConfig `json:"query"`
	Document SideConfig `json:"document"`
	// Precision is float32 or int8; empty when the configuration does not
	// say (most exports are float32). Informational, like Source.
	Precision Precision `json:"precision,omitempty"`
	// Source and License record where the weights come from; informational.
	Source  string `json:"source,omitempty"`
	License string `json:"license,omitempty"`
}

// SideConfig configures how queries or documents are encoded.
type SideConfig struct {
	// MaxLength is the maximum sequence length in tokens, special tokens
	// included; longer texts are truncated.
	MaxLength int `json:"max_length,omitempty"`
	// Prefix is text prepended before tokenization (e.g. BGE's query
	// instruction, E5's "query: ").
	Prefix string `json:"prefix,omitempty"`
	// Marker is a token inserted right after the leading special tokens
	// (ColBERT's [Q] and [D], usually "[unused0]" and "[unused1]").
	Marker string `json:"marker,omitempty"`
	// Augment pads the sequence with MaskToken up to MaxLength (ColBERT's
	// query augmentation). The padding tokens are returned as token output.
	Augment bool `json:"augment,omitempty"`
	// AttendToAugment sets the attention mask of augmentation tokens to 1;
	// ColBERTv2 leaves it 0.
	AttendToAugment bool `json:"attend_to_augment,omitempty"`
	// MaskToken is the augmentation token; default "[MASK]".
	MaskToken string `json:"mask_token,omitempty"`
	// SkipPunctuation drops the token output of every ASCII punctuation
	// character that is a token of its own (ColBERT's document skiplist).
	SkipPunctuation bool `json:"skip_punctuation,omitempty"`
	// SkipTokens drops the token output of these tokens.
	SkipTokens []string `json:"skip_tokens,omitempty"`
	// Model is a separate ONNX file for this side (asymmetric encoders).
	Model string `json:"model,omitempty"`
	// Output overrides the output name for this side.
	Output string `json:"output,omitempty"`
	// Projection overrides the shared projection for this side.
	Projection *Projection `json:"projection,omitempty"`
}

// Projection is a linear map without bias, y = W·x, stored as raw
// little-endian float32 in torch.nn.Linear.weight layout: OutputDim rows of
// InputDim values.
type Projection struct {
	File      string `json:"file"`
	InputDim  int    `json:"input_dim"`
	OutputDim int    `json:"output_dim"`
}

// ReadConfig reads and validates dir/tandem.json. Errors name the file and,
// for syntax and type errors, the line.
func ReadConfig(dir string) (*Config, error) {
	path := filepath.Join(dir, ConfigFile)
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s (see docs/models.md)", ErrNoConfig, path)
		}
		return nil, fmt.Errorf("encoder: read config: %w", err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig decodes a configuration, rejecting unknown fields, and
// validates it.
func ParseConfig(data []byte) (*Config, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var cfg Config
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrBadConfig, describeJSONError(data, err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: trailing data after the JSON object", ErrBadConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

func describeJSONError(data []byte, err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("line %d: %v", lineOf(data, se.Offset), err)
	case errors.As(err, &te):
		return fmt.Sprintf("line %d: field %q: %v", lineOf(data, te.Offset), te.Field, err)
	}
	// Unknown fields: encoding/json says `json: unknown field "x"`.
	return err.Error()
}

func lineOf(data []byte, offset int64) int {
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	return 1 + bytes.Count(data[:offset], []byte("\n"))
}

// Validate checks the configuration on its own; checks against the model
// and tokenizer happen in Load. It fills nothing in.
func (c *Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadConfig, fmt.Sprintf(format, args...))
	}
	switch c.Pooling {
	case PoolCLS, PoolMean, PoolNone, PoolModel:
	case "":
		return bad(`field "pooling" is required: cls, mean, none or model`)
	default:
		return bad(`field "pooling": %q is not cls, mean, none or model`, c.Pooling)
	}
	switch c.Similarity {
	case Dot, Cosine:
	case "":
		return bad(`field "similarity" is required: dot or cosine`)
	default:
		return bad(`field "similarity": %q is not dot or cosine`, c.Similarity)
	}
	switch c.Precision {
	case "", Float32, Int8:
	default:
		return bad(`field "precision": %q is not float32 or int8`, c.Precision)
	}
	for _, f := range []struct{ name, v string }{{"model", c.Model}, {"tokenizer", c.Tokenizer},
		{"query.model", c.Query.Model}, {"document.model", c.Document.Model}} {
		if f.v != "" && (filepath.IsAbs(f.v) || strings.Contains(f.v, "..")) {
			return bad("field %q: %q must be a file name inside the model directory", f.name, f.v)
		}
	}
	if err := c.Projection.validate("projection"); err != nil {
		return err
	}
	for _, s := range []struct {
		name string
		side *SideConfig
	}{{"query", &c.Query}, {"document", &c.Document}} {
		if s.side.MaxLength < 0 {
			return bad("field %q: %d is negative", s.name+".max_length", s.side.MaxLength)
		}
		if s.side.Augment && c.Pooling != PoolNone {
			return bad("field %q needs pooling none: augmentation tokens would change the pooled vector", s.name+".augment")
		}
		if !s.side.Augment && s.side.AttendToAugment {
			return bad("field %q is set without %q", s.name+".attend_to_augment", s.name+".augment")
		}
		if err := s.side.Projection.validate(s.name + ".projection"); err != nil {
			return err
		}
	}
	return nil
}

func (p *Projection) validate(field string) error {
	if p == nil {
		return nil
	}
	if p.File == "" || filepath.IsAbs(p.File) || strings.Contains(p.File, "..") {
		return fmt.Errorf("%w: field %q: file must name a file inside the model directory", ErrBadConfig, field+".file")
	}
	if p.InputDim <= 0 || p.OutputDim <= 0 {
		return fmt.Errorf("%w: field %q: input_dim and output_dim must be positive", ErrBadConfig, field)
	}
	return nil
}

// side returns the configuration of one side with defaults filled in.
func (c *Config) side(s Side) SideConfig {
	sc := c.Query
	if s == Document {
		sc = c.Document
	}
	if sc.MaxLength == 0 {
		sc.MaxLength = DefaultQueryMaxLength
		if s == Document {
			sc.MaxLength = DefaultDocumentMaxLength
		}
	}
	if sc.MaskToken == "" {
		sc.MaskToken = "[MASK]"
	}
	if sc.Model == "" {
		sc.Model = c.Model
	}
	if sc.Model == "" {
		sc.Model = "model.onnx"
	}
	if sc.Output == "" {
		sc.Output = c.Output
	}
	if sc.Projection == nil {
		sc.Projection = c.Projection
	}
	return sc
}
