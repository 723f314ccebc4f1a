// Package ort owns the process-wide ONNX Runtime environment
// (github.com/yalue/onnxruntime_go), loaded with dlopen at run time so that
// builds do not need the library installed.
package ort
