package engine

import "github.com/tandemsearch/tandem/internal/native"

// NativeLocations says where this build found what it links and loads at
// run time: the native prefix (FAISS, ONNX Runtime and the models set up
// by scripts/setup.sh or scripts/install.sh), the ONNX Runtime library
// and the models directory; "" for each not found.
type NativeLocations struct {
	Prefix, ONNXRuntime, Models string
}

// Native returns the native locations (see NativeLocations).
func Native() NativeLocations {
	return NativeLocations{Prefix: native.Prefix(), ONNXRuntime: native.ONNXRuntimeLibrary(), Models: native.ModelsDir()}
}
