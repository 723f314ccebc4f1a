package latecollect

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkMaxSim measures exact rescoring on one document of SciFact's
// average length (238 MiniLM tokens) against a 20-token query: f16
// decoding plus the maxSim kernel, with the portable Go code (table
// decoding, maxSimGo) and, where the CPU has them, the assembly kernels
// that search uses (F16C decoding, maxSimAVX2); then the same a block of
// rows at a time (maxSimBlob, what search runs); then each part alone.
func BenchmarkMaxSim(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	q, d := randomUnit(r, 20, 384), randomUnit(r, 238, 384)
	blob, _ := EncodeTokens(d, 384, F16)
	h, _ := parseHeader(blob)
	best := make([]float32, 20)
	buf := make([]float32, len(d))
	// portable, then the AVX2 and F16C kernels, then AVX-512, as the CPU
	// has them.
	type kernels struct {
		name               string
		avx2, f16c, avx512 bool
	}
	runs := []kernels{{name: "portable"}}
	if useAVX2 && useF16C {
		runs = append(runs, kernels{"asm", true, true, false})
	}
	if useAVX512 && useF16C {
		runs = append(runs, kernels{"avx512", true, true, true})
	}
	saved := kernels{"", useAVX2, useF16C, useAVX512}
	defer func() { useAVX2, useF16C, useAVX512 = saved.avx2, saved.f16c, saved.avx512 }()
	for _, k := range runs {
		name := k.name
		useAVX2, useF16C, useAVX512 = k.avx2, k.f16c, k.avx512
		ql := newQueryLanes(q, 384)
		b.Run("decode+kernel/"+name, func(b *testing.B) {
			for b.Loop() {
				decodeRows(blob, h, 0, h.count, buf)
				maxSim(q, buf, 384, nil, best)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(20*238), "ns/dot")
		})
		b.Run("blocks/"+name, func(b *testing.B) {
			var scratch []float32
			for b.Loop() {
				scratch = maxSimBlob(q, ql, blob, h, best, scratch)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(20*238), "ns/dot")
		})
		b.Run("decode/"+name, func(b *testing.B) {
			for b.Loop() {
				decodeRows(blob, h, 0, h.count, buf)
			}
		})
		b.Run("kernel/"+name, func(b *testing.B) {
			for b.Loop() {
				maxSim(q, buf, 384, nil, best)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(20*238), "ns/dot")
		})
	}
}

// BenchmarkEncodeTokens measures encoding one SciFact-sized document (327
// 384-d tokens) as float16, with the portable conversion and, where the
// CPU has it, F16C: what indexing pays per document before the blob is
// stored.
func BenchmarkEncodeTokens(b *testing.B) {
	d := randomUnit(rand.New(rand.NewPCG(1, 2)), 327, 384)
	saved := useF16C
	defer func() { useF16C = saved }()
	for _, f16c := range []bool{false, true} {
		if f16c && !saved {
			continue
		}
		useF16C = f16c
		name := map[bool]string{false: "portable", true: "f16c"}[f16c]
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := EncodeTokens(d, 384, F16); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(d)), "ns/value")
		})
	}
}

// BenchmarkScoreCentroids measures a residual search's first stage on
// SciFact's default index: 32 query tokens against 8,192 centroids of 384
// values, on two workers, with OpenBLAS's matrix product, with the
// AVX-512 kernels where the CPU has them, and in int8 with VNNI
// (scoreCentroidsI8) where it has that.
func BenchmarkScoreCentroids(b *testing.B) {
	// SciFact's codebook, and a million synthetic documents'.
	for _, shape := range []struct{ nlist, dim int }{{8192, 384}, {32768, 128}} {
		r := rand.New(rand.NewPCG(3, 3))
		const nq = 32
		nlist, dim := shape.nlist, shape.dim
		q, cent := randomUnit(r, nq, dim), randomUnit(r, nlist, dim)
		table := make([]float32, nlist*32)
		name := fmt.Sprintf("%dx%d/", nlist, dim)
		b.Run(name+"blas", func(b *testing.B) {
			for b.Loop() {
				if err := scoreCentroids(q, nq, dim, cent, 32, table, 2, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		if ql := newQueryLanes(q, dim); ql != nil {
			b.Run(name+"avx512", func(b *testing.B) {
				for b.Loop() {
					if err := scoreCentroids(q, nq, dim, cent, 32, table, 2, ql); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		if i8Centroids(dim) {
			qi, c := newQueryI8(q, dim), newCentI8(cent, dim)
			b.Run(name+"vnni-i8", func(b *testing.B) {
				for b.Loop() {
					scoreCentroidsI8(qi, c, 32, table, 2)
				}
			})
		}
	}
}

// BenchmarkMaxSimI8 measures exact scoring of the document of
// BenchmarkMaxSim (238 tokens of 384 values) against queries of 20 and 32
// tokens: from a float16 blob as search scores today (maxSimBlob, F16C
// decoding and the float32 kernels), and from an I8 blob with the query
// quantised once (queryI8.maxSim), with the VNNI and AVX2 kernels where
// the CPU has them and with the portable code.
func BenchmarkMaxSimI8(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	d := randomUnit(r, 238, 384)
	f16, _ := EncodeTokens(d, 384, F16)
	hf, _ := parseHeader(f16)
	i8, _ := EncodeTokens(d, 384, I8)
	hi, _ := parseHeader(i8)
	saved := struct{ vnni, avx2 bool }{useVNNI, useAVX2}
	defer func() { useVNNI, useAVX2 = saved.vnni, saved.avx2 }()
	for _, nq := range []int{20, 32} {
		q := randomUnit(r, nq, 384)
		best := make([]float32, nq)
		dots := float64(nq * 238)
		b.Run(fmt.Sprintf("q%d/f16", nq), func(b *testing.B) {
			ql := newQueryLanes(q, 384)
			var scratch []float32
			for b.Loop() {
				scratch = maxSimBlob(q, ql, f16, hf, best, scratch)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/dots, "ns/dot")
		})
		for _, k := range []struct {
			name       string
			vnni, avx2 bool
		}{{"vnni", true, true}, {"avx2", false, true}, {"portable", false, false}} {
			if (k.vnni && !saved.vnni) || (k.avx2 && !saved.avx2) {
				continue
			}
			useVNNI, useAVX2 = k.vnni, k.avx2
			qi := newQueryI8(q, 384)
			b.Run(fmt.Sprintf("q%d/i8-%s", nq, k.name), func(b *testing.B) {
				var pad []byte
				for b.Loop() {
					pad = qi.maxSim(i8[headerSize:], hi.count, best, pad)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/dots, "ns/dot")
			})
		}
		useVNNI, useAVX2 = saved.vnni, saved.avx2
	}
}

// BenchmarkListMax scores one code list of 200,000 tokens of 384
// dimensions (48 code bytes) of 5,000 documents, 40% of them slotted,
// against 32 query tokens; ns/op divided by the 80,000 slotted tokens is
// the cost of a token the list stage scores.
func BenchmarkListMax(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	const n, ndocs, codeBytes = 200_000, 5_000, 48
	tb := randomTables(r, 32, 64, codeBytes)
	tb.withPairs(1)
	defer tb.release()
	docs := make([]uint32, n)
	for i := range docs {
		docs[i] = uint32(r.IntN(ndocs))
	}
	codes := make([]byte, n*codeBytes)
	for i := range codes {
		codes[i] = byte(r.Uint32())
	}
	for _, fifths := range []int{2, 5} {
		slots := make([]int32, ndocs)
		nslots := 0
		for d := range slots {
			slots[d] = -1
			if r.IntN(5) < fifths {
				slots[d] = int32(nslots)
				nslots++
			}
		}
		slab := make([]int16, nslots*lutBlock)
		for _, kernel := range []string{"asm", "go"} {
			b.Run(fmt.Sprintf("%s/slotted=%d%%", kernel, 20*fifths), func(b *testing.B) {
				for b.Loop() {
					if kernel == "asm" {
						tb.listMax(slab, 7, docs, slots, codes, codeBytes)
					} else {
						tb.listMaxGo(slab, 7, docs, slots, codes, codeBytes)
					}
				}
			})
		}
	}
}
