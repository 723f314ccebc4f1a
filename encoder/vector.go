package encoder

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
)

// poolCLS copies the first token's vector.
func poolCLS(hidden []float32, dim int) []float32 {
	return append([]float32(nil), hidden[:dim]...)
}

// poolMean averages the vectors of tokens with attention 1, as
// sentence-transformers does. hidden holds len(attn) vectors of dim values.
func poolMean(hidden []float32, attn []int64, dim int) []float32 {
	out := make([]float32, dim)
	var n int
	for t, a := range attn {
		if a == 0 {
			continue
		}
		n++
		for j, v := range hidden[t*dim : (t+1)*dim] {
			out[j] += v
		}
	}
	if n > 0 {
		for j := range out {
			out[j] /= float32(n)
		}
	}
	return out
}

// normalize scales v to unit length in place; a zero vector stays zero.
func normalize(v []float32) {
	var sum float64
	for _, x := range v {
		sum += float64(x) * float64(x)
	}
	if sum == 0 {
		return
	}
	inv := 1 / math.Sqrt(sum)
	for i := range v {
		v[i] = float32(float64(v[i]) * inv)
	}
}

// projection is a bias-free linear map y = W·x with W in
// torch.nn.Linear.weight layout (out rows of in values).
type projection struct {
	in, out int
	w       []float32
}

func loadProjection(path string, p *Projection) (*projection, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("%w: projection %s", ErrMissingFile, path)
		}
		return nil, fmt.Errorf("encoder: read projection: %w", err)
	}
	want := 4 * p.InputDim * p.OutputDim
	if len(data) != want {
		return nil, fmt.Errorf("%w: projection %s has %d bytes, want %d (%d×%d float32)",
			ErrBadConfig, path, len(data), want, p.OutputDim, p.InputDim)
	}
	w := make([]float32, p.InputDim*p.OutputDim)
	for i := range w {
		w[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
	}
	return &projection{in: p.InputDim, out: p.OutputDim, w: w}, nil
}

// apply returns W·x in a new slice.
func (p *projection) apply(x []float32) []float32 {
	y := make([]float32, p.out)
	for k := range y {
		row := p.w[k*p.in : (k+1)*p.in]
		var s float32
		for j, v := range row {
			s += v * x[j]
		}
		y[k] = s
	}
	return y
}
